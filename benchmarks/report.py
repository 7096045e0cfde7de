"""Turns the collected results (run.py's JSON) into the text table and the decode chart (the HF
Llama suite is in the table only)."""
import math

import cases
from modes import FAILED, LABELS, MODES, OK
from worker import SCENARIOS


def _fmt(v, spec=".2f", none="-"):
    return none if v is None or (isinstance(v, float) and not math.isfinite(v)) else format(v, spec)


def _ratio(v, base):
    return v / base if v is not None and base else None


def _check(entry):
    c = entry.get("check")
    if not c:
        return ""
    return ("ok " if c["ok"] else "FAILED ") + _fmt(c["rel_err"], ".0e")


def _note(entry):
    parts = []
    if entry.get("status") not in (OK, FAILED) and entry.get("message"):
        parts.append(entry["message"].splitlines()[0][:110])
    c = entry.get("counters")
    if c:
        graphs = f"graphs {c['graphs']} " if "graphs" in c else ""
        parts.append(graphs + "specs %s compiles %s fallbacks %s kept %s escaped %s lt-replayed %s" % tuple(
            c.get(k) for k in ("specializations", "compiles", "fallbacks", "reused_buffers", "escaped_buffers",
                               "cublaslt_replayed")) + (f" aten-replayed {c['aten_replayed']}" if c.get("aten_replay_sites")
                                                        else ""))
    d = entry.get("dynamo")
    if d:
        parts.append(" ".join(f"{k.replace('_', ' ')} {v}" for k, v in d.items()))
    return "; ".join(parts)


def _value(entry, key):
    """The timed value of an entry whose run completed (ok or FAILED), else None."""
    return entry.get(key) if entry.get("status") in (OK, FAILED) else None


def _row(cols, widths, align):
    """One line; align has one letter per column, l or r."""
    return "  ".join(str(c).rjust(w) if a == "r" else str(c).ljust(w)
                     for c, w, a in zip(cols, widths, align)).rstrip()


def _modes(results):
    """(name, label) of the modes this run included, in the standard order."""
    return [(m, label) for m, label, _ in MODES if m in results.get("modes", {})]


def percall_table(results):
    floor = results.get("native_floor", {})
    floor_us = floor.get("us") if floor.get("status") == OK else None
    head = "native floor (C++ cuLaunchKernel of an empty kernel): " + (
        f"{floor_us:.2f} us per launch" if floor_us else "unavailable - " + str(floor.get("message", ""))[:200])
    widths, align = [14, 24, 11, 7, 7, 8, 9, 13, 8, 7, 0], "llrrrrrlrrl"
    lines = ["Per call, us: host wall time per call, synced every 100 calls; each mode's cases timed in turn, "
             "round after round, median of the rounds", head,
             "x eager = time / eager time (below 1 is faster); x floor = time / native floor, the median over the "
             "mode's rounds of each round's time over the floor measured in that round (host speed drifts); kernels = device kernels per "
             "call (profiler); x floor/k = time / (native floor x kernels)", "",
             _row(["case", "mode", "us", "x eager", "x floor", "kernels", "x floor/k", "check", "peak MiB", "first s",
                   "note"], widths, align)]
    for name, desc, *_ in cases.CASES:
        eager = _value(results["modes"].get("eager", {}).get("percall", {}).get(name, {}), "us")
        for i, (mode, label) in enumerate(_modes(results)):
            e = results["modes"][mode].get("percall", {}).get(name, {"status": "missing"})
            us = _value(e, "us")
            shown = _fmt(us) if us is not None else e.get("status", "missing")
            kernels, floor = e.get("kernels"), e.get("floor_us", floor_us)
            x_floor = e.get("x_floor", _ratio(us, floor) if floor else None)  # worker.time_cases
            per_kernel = x_floor / kernels if x_floor is not None and kernels else None
            lines.append(_row([name if i == 0 else "", label, shown, _fmt(_ratio(us, eager)),
                               _fmt(x_floor, ".1f"), _fmt(kernels, ".2g"), _fmt(per_kernel),
                               _check(e), _fmt(e.get("peak_mib"), ".1f"),
                               _fmt(e.get("first_call_s")), _note(e)], widths, align))
        lines.append("")
    return lines


def _floor(results, batch, scenario):
    extras = results["modes"].get("eager", {}).get("decode", {}).get(str(batch), {}).get("extras", {})
    f = extras.get(f"floor_{scenario}", {})
    return f if f.get("status") == OK else None


def _scenario_title(results, scenario):
    if scenario == "fixed":
        return f"fixed ctx {results.get('decode_config', {}).get('max_seq', '?')}"
    return "growing ctx 128-191"


def decode_table(results):
    cfg = results.get("decode_config", {})
    widths, align = [19, 5, 24, 11, 7, 7, 13, 8, 7, 0], "lrlrrrlrrl"
    lines = ["Decode step, ms per step (median of repeats): "
             f"{cfg.get('n_layers')} layers, d={cfg.get('d_model')}, {cfg.get('n_heads')} heads x {cfg.get('head_dim')}, "
             f"ffn {cfg.get('ffn_dim')}, {cfg.get('dtype', '').replace('torch.', '')}",
             "x floor = time / device floor (the eager step captured in one CUDA graph, replays timed with events)",
             "growing: 64 steps, context 128 -> 191, each mode from the same state; its floor (*) is the fixed-context "
             "floor at context 160, the mean length (a graph per length is not feasible)",
             "first s = first call (capture + compile + run); growing: the whole first pass of 64 steps", "",
             _row(["scenario", "batch", "mode", "ms", "x eager", "x floor", "check", "peak MiB", "first s", "note"],
                  widths, align)]
    for scenario in SCENARIOS:
        for batch in results.get("batches", []):
            eager_e = results["modes"].get("eager", {}).get("decode", {}).get(str(batch), {}).get(scenario, {})
            eager = _value(eager_e, "ms")
            floor = _floor(results, batch, scenario)
            floor_ms = floor["ms"] if floor else None
            title = _scenario_title(results, scenario)
            for i, (mode, label) in enumerate(_modes(results)):
                e = results["modes"][mode].get("decode", {}).get(str(batch), {}).get(scenario)
                e = e or {"status": "missing"}
                ms = _value(e, "ms")
                first = e.get("first_call_s", e.get("first_pass_s"))
                lines.append(_row([title if i == 0 else "", batch if i == 0 else "", label,
                                   _fmt(ms, ".3f") if ms is not None else e.get("status", "missing"),
                                   _fmt(_ratio(ms, eager)), _fmt(_ratio(ms, floor_ms)), _check(e),
                                   _fmt(e.get("peak_mib"), ".0f"), _fmt(first), _note(e)], widths, align))
            label = "device floor" + ("*" if scenario == "growing" else "")
            lines.append(_row(["", "", label, _fmt(floor_ms, ".3f"), _fmt(_ratio(floor_ms, eager)),
                               _fmt(1.0 if floor_ms else None), "", "", "",
                               "" if floor else "unavailable"], widths, align))
            lines.append("")
    return lines


def _hf_check(entry):
    c = entry.get("check")
    if not c:
        return ""
    return ("ok " if c.get("ok") else "FAILED ") + f"{c.get('match')}/{c.get('total')}"


def hf_table(results):
    """Greedy generation with the HF Llama: tokens/s of the timed decode steps, per batch and mode."""
    cfg = results.get("hf_config", {})
    kernels = "Triton RMSNorm + SiLU" if str(cfg.get("triton_modules", "0")) not in ("0", "None") else \
        "HF's own RMSNorm + SiLU (no Triton)"
    widths, align = [5, 24, 10, 7, 9, 14, 8, 7, 0], "rlrrrlrrl"
    g = cfg.get
    lines = [f"HF Llama greedy {g('new_tokens', 64)} tokens, tokens/s: transformers {g('transformers', '?')} "
             f"LlamaForCausalLM, {g('layers')} layers, hidden {g('hidden')}, {g('heads')} heads / {g('kv_heads')} kv, "
             f"ffn {g('intermediate')}, vocab {g('vocab')}, {g('dtype', '').replace('torch.', '')}, "
             f"{g('attn_implementation', '?')} attention, {kernels}",
             f"tok/s = batch x {cfg.get('new_tokens', 64)} / time of the {cfg.get('new_tokens', 64)} decode steps "
             f"(after a {cfg.get('prompt_len', 16)}-token prefill through the same step; median of repeats); "
             "x eager = tok/s / eager's (above 1 is faster)",
             "check = greedy tokens equal to eager's in the same run (matching/total, prefill's token included); "
             "first s = first call (capture + compile + run)", "",
             _row(["batch", "mode", "tok/s", "x eager", "ms/step", "check", "peak MiB", "first s", "note"],
                  widths, align)]
    for batch in results.get("hf_batches", []):
        eager = _value(results["modes"].get("eager", {}).get("hf", {}).get(str(batch), {}), "tok_s")
        for i, (mode, label) in enumerate(_modes(results)):
            e = results["modes"][mode].get("hf", {}).get(str(batch)) or {"status": "missing"}
            tok_s = _value(e, "tok_s")
            note = _note(e)
            ec = e.get("eager_check") or {}
            if ec.get("rel_err"):
                note = "; ".join(p for p in (f"vs HF's own ops: rel err {ec['rel_err']:.1e}", note) if p)
            if e.get("status") == FAILED and e.get("message"):
                note = "; ".join(p for p in (e["message"][:160], note) if p)
            lines.append(_row([batch if i == 0 else "", label,
                               _fmt(tok_s, ".1f") if tok_s is not None else e.get("status", "missing"),
                               _fmt(_ratio(tok_s, eager)), _fmt(_value(e, "ms_per_step"), ".3f"), _hf_check(e),
                               _fmt(e.get("peak_mib"), ".0f"), _fmt(e.get("first_call_s")), note], widths, align))
        lines.append("")
    return lines


def latency_table(results):
    """Time to first result per mode: the first call (capture + compile + run) of the per-call cases
    and of the decode step, and the whole first pass of the growing-context run."""
    suites = results.get("meta", {}).get("suites", "percall,decode").split(",")
    cols = []
    if "percall" in suites:
        cols += [(f"{name}", lambda r, n=name: r.get("percall", {}).get(n, {}), "first_call_s")
                 for name in ("add_one", "x_plus_1", "mm_relu")]
    if "decode" in suites:
        for b in results.get("batches", []):
            cols.append((f"step b{b}", lambda r, b=b: r.get("decode", {}).get(str(b), {}).get("fixed") or {},
                         "first_call_s"))
            cols.append((f"grow64 b{b}", lambda r, b=b: r.get("decode", {}).get(str(b), {}).get("growing") or {},
                         "first_pass_s"))
    if "hf" in suites:
        cols += [(f"hf b{b}", lambda r, b=b: r.get("hf", {}).get(str(b)) or {}, "first_call_s")
                 for b in results.get("hf_batches", [])]
    widths, align = [24] + [11] * len(cols), "l" + "r" * len(cols)
    lines = ["Time to first result, s (first call: capture + compile + run; grow64: first pass of the 64 growing "
             "steps, every recompile included; Inductor/Triton/trident disk caches as found, see --fresh-caches)",
             "", _row(["mode"] + [c[0] for c in cols], widths, align)]
    for mode, label in _modes(results):
        r = results["modes"][mode]
        cells = []
        for _, get, key in cols:
            e = get(r)
            cells.append(_fmt(e.get(key)) if e.get(key) is not None else e.get("status", "-"))
        lines.append(_row([label] + cells, widths, align))
    return lines + [""]


def compile_latency_table(results):
    """trident's time to add specializations to the decode step (compile_latency.py's rows)."""
    lat = results.get("latency") or {}
    if lat.get("status") != OK:
        return ["Adding specializations (compile_latency.py): " + f"{lat.get('status', '-')} {lat.get('message', '')}".strip(),
                ""]
    lines = [f"Adding specializations, trident, {lat['layers']}-layer decode step ({lat['where']}), s: cold = "
             "caches as found, warm = a second compiled function after the first (every kernel compiled)", ""]
    for row in lat["rows"]:
        secs = "" if row["seconds"] is None else f"{row['seconds']:7.3f}"
        lines.append(f"  {row['run']:5s} pos {row['pos']!s:4s} {secs:>7s}  {row['what']}")
    return lines + [""]


def table(results):
    meta = results.get("meta", {})
    env = meta.get("env") or {}   # None when no worker ran far enough to say
    title = (f"torch-trident benchmarks: {env.get('gpu', env.get('device', '?'))}, torch {env.get('torch', '?')}, "
             f"triton {env.get('triton', '?')}, {'quick' if meta.get('quick') else 'full'} run, "
             f"{meta.get('elapsed_s', 0):.0f} s, commit {meta.get('commit') or '?'}"
             + (f", best of {meta['rounds']} rounds" if meta.get("rounds", 1) > 1 else ""))
    lines = ["=" * len(title), title, "=" * len(title), ""]
    suites = meta.get("suites", "percall,decode").split(",")
    lines += (percall_table(results) if "percall" in suites else []) + (
        decode_table(results) if "decode" in suites else []) + (
        hf_table(results) if "hf" in suites else []) + (
        latency_table(results) if results.get("modes") else []) + (
        compile_latency_table(results) if "latency" in suites else [])
    lines.append("statuses: ok | FAILED (result differs from eager; time still shown in the JSON) | unsupported "
                 "(UnsupportedError or missing/failing backend) | error | timeout | skipped (time budget)")
    return "\n".join(lines)


def chart(results, path):
    """Grouped bars of ms per decode step, one panel per batch size; modes that did not run are
    labelled at the base of their slot."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    batches = results.get("batches", [])
    names = [m for m, _ in _modes(results)] + ["floor"]
    fig, axes = plt.subplots(1, max(len(batches), 1), figsize=(7 * max(len(batches), 1), 4.8), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / len(names)
    for ax, batch in zip(axes[0], batches):
        for j, name in enumerate(names):
            for k, scenario in enumerate(SCENARIOS):
                x = k + (j - (len(names) - 1) / 2) * width
                if name == "floor":
                    f = _floor(results, batch, scenario)
                    e = {"status": OK, "ms": f["ms"]} if f else {"status": "unavailable"}
                else:
                    e = results["modes"].get(name, {}).get("decode", {}).get(str(batch), {}).get(scenario) or {}
                ms = _value(e, "ms")
                if ms is None:
                    ax.text(x, 0, " " + str(e.get("status", "missing")), rotation=90, ha="center", va="bottom",
                            fontsize=7, color="gray")
                    continue
                failed = e.get("status") == FAILED
                ax.bar(x, ms, width, color=colors[j % len(colors)], hatch="//" if failed else None,
                       edgecolor="red" if failed else None, label=(LABELS.get(name, "device floor") if k == 0 else None))
                if failed:
                    ax.text(x, ms, "FAILED", rotation=90, ha="center", va="bottom", fontsize=7, color="red")
        ax.set_xticks(range(len(SCENARIOS)), [_scenario_title(results, "fixed"),
                                              _scenario_title(results, "growing") + "\n(floor at ctx 160)"])
        ax.set_xlim(-0.5, len(SCENARIOS) - 0.5)
        ax.set_ylabel("ms per decode step")
        ax.set_title(f"batch {batch}")
        ax.legend(fontsize=7)
    cfg = results.get("decode_config", {})
    gpu = results.get("meta", {}).get("env", {}).get("gpu")
    fig.suptitle(f"Decode step: {cfg.get('n_layers')} layers, d={cfg.get('d_model')}, "
                 f"{cfg.get('dtype', '').replace('torch.', '')}" + (f" ({gpu})" if gpu else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

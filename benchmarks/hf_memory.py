"""Where the HF Llama's device memory goes under trident against eager (GPU diagnostic).

For each batch: one eager generation, then trident's, each from a memory baseline taken after its
step (and static cache) exists and after an eager warm-up run (so PyTorch's cuBLAS workspace is in the
baseline, as in the suite's workers). Prints, in MiB above the baseline: the peak of the first
generation, memory still held after it, the peak of a second generation, and trident's kept buffers
(counters' reused_bytes: the module's pool of kept buffers, csrc/runtime/memory/buffer_reuse.h).

Two measures of device memory: allocated (live tensors, what the suite's peak column reports) and
reserved (the segments PyTorch's caching allocator took from the device, freed blocks it caches for
reuse included: what the process occupies). Trident's kept buffers count as allocated, where eager's
freed blocks only count as reserved, so the reserved peaks compare what each mode takes from the device.
Unused cached segments are released before each baseline so both modes start from the same reserve.

    python3 benchmarks/hf_memory.py [--batches 1,8]
"""
import argparse
import gc
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hf_llama  # noqa: E402

MIB = 2**20


def measure(fn, gen, reset):
    """Allocated: (peak of a first generation, held after it, peak of a second); reserved: (peak of
    the first, peak of the second); MiB above the baseline."""
    gc.collect()  # earlier batches' dropped graphs (cycles) and the state they held, as worker.py
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base, base_res = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    torch.cuda.reset_peak_memory_stats()
    gen.run(fn, reset)
    torch.cuda.synchronize()
    first_peak, held = torch.cuda.max_memory_allocated() - base, torch.cuda.memory_allocated() - base
    first_res = torch.cuda.max_memory_reserved() - base_res
    torch.cuda.reset_peak_memory_stats()
    gen.run(fn, reset)
    torch.cuda.synchronize()
    second_peak, second_res = torch.cuda.max_memory_allocated() - base, torch.cuda.max_memory_reserved() - base_res
    return [v / MIB for v in (first_peak, held, second_peak, first_res, second_res)]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batches", default="1,8")
    a = p.parse_args()
    import trident
    cfg = hf_llama.FULL
    model = hf_llama.build_model(cfg, "cuda")
    hf_llama.use_kernels(model, triton=True)
    for batch in (int(b) for b in a.batches.split(",")):
        gen = hf_llama.Generation(cfg, batch, "cuda")
        warm = hf_llama.DecodeStep(model, batch, cfg.max_cache)
        gen.run(warm, warm.reset)
        del warm
        step = hf_llama.DecodeStep(model, batch, cfg.max_cache)
        eager = measure(step, gen, step.reset)
        compiled = trident.compile(step)
        tri = measure(compiled, gen, step.reset)
        c = trident.counters(compiled)
        print(f"batch {batch}: MiB above baseline    allocated: first-gen peak   held after   second-gen peak"
              "    reserved: first-gen peak   second-gen peak")
        for name, m in (("eager", eager), ("trident", tri)):
            print(f"  {name:<30} {m[0]:26.2f} {m[1]:12.2f} {m[2]:17.2f} {m[3]:27.2f} {m[4]:17.2f}")
        print(f"  trident reused_bytes {c['reused_bytes'] / MIB:.2f} MiB in {c['reused_buffers']} buffers, "
              f"cublaslt_gemms {c['cublaslt_gemms']} declined {c['cublaslt_declined']} "
              f"replayed {c['cublaslt_replayed']}, aten_replay_sites {c['aten_replay_sites']} "
              f"replaying {c['aten_replayed']}")
        del compiled, step
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

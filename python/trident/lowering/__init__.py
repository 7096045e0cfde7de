"""The lowering: a captured, functional ATen graph (torch.export's ExportedProgram) becomes one
specialization's host IR text (docs/host_ir.md), with its guards.

    lower.py            walks the graph; each call node goes to the first rule of lower.RULES
    context.py          what the rules may use of the lowering in progress (LoweringContext)
    hir.py              writes every line of host IR
    data_values.py      .item(), runtime assertions, branches on data, data-dependent sizes
    float_symbols.py    Python floats as run-time values
    symbolic.py         symbolic ints: computed natively, and the guards over them
    guard_text.py       the spec's guards on its arguments
    lazy_views.py       views computed only where something reads them
    builtin_lower.py    ATen elementwise ops as trident's own kernels (builtin_kernels.py)
    builtin_rotary.py   the rotary embedding pattern as one builtin launch
    triton_lower.py     user Triton kernels: config, specialization (triton_specialize.py), launch
    reinplace.py        functional updates written in place again
    constant_fold.py    values computed once, at lowering
    cse.py              one computation of what several layers compute alike
    output_trees.py     the return statement: result objects and updates of the arguments

Before the lowering, compiled.py captures (torch.export, library_launches.py, python_kernels.py);
after it, the runtime (csrc/) verifies, plans, emits C and loads the specialization.
"""

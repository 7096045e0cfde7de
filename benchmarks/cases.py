"""Per-call microbenchmark cases: tiny functions whose cost is almost all host work.

Each case is (name, description, fn, make_args, reference, tol); fn is what every mode compiles,
reference is a pure-PyTorch function the eager result is checked against.
"""
import torch

import kernels


def one_kernel(x):
    return kernels.add_one(x)


def three_kernels(x):
    return kernels.add_one(kernels.add_one(kernels.add_one(x)))


def empty_kernel(x):
    return kernels.noop(x)


def add_scalar(x):
    return x + 1


def mm_relu(a, b):
    return torch.relu(torch.mm(a, b))


def three_ref(x):
    return x + 3


def _vec(device):
    return (torch.randn(4096, device=device),)


def _mats(device):
    g = torch.Generator(device=device).manual_seed(0)
    return tuple(torch.randn((64, 64), generator=g, device=device).half() for _ in range(2))


CASES = [
    ("add_one", "one user Triton kernel (add_one, 4096 fp32)", one_kernel, _vec, kernels.add_one_ref, 1e-6),
    ("three_kernels", "three chained user Triton kernels", three_kernels, _vec, three_ref, 1e-6),
    ("noop", "one near-empty user Triton kernel", empty_kernel, _vec, kernels.noop_ref, 0.0),
    ("x_plus_1", "x + 1 (4096 fp32, ATen)", add_scalar, _vec, add_scalar, 1e-6),
    ("mm_relu", "relu(mm) 64x64 fp16 (ATen)", mm_relu, _mats, lambda a, b: torch.relu(a.float() @ b.float()).half(), 2e-3),
]

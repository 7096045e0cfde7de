"""A stand-in for Triton's active CUDA driver, so kernels can be specialized, compiled for sm_90 and
captured by Dynamo on a machine without a GPU (shared/TRITON.md sections 1.9 and 3.5)."""
import torch
from triton.backends.compiler import GPUTarget


class FakeCudaDriver:
    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)

    def get_active_torch_device(self):
        return torch.device("cpu")

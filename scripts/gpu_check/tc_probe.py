"""A few GEMMs, convolutions and attentions in each precision: ncu's target for the
Tensor Core oracle (scripts/gpu_check/device.py runs it under ``ncu`` with the tensor-pipe
metrics). Each op runs twice: cuDNN and cuBLAS pick their kernels on the first call.

    python tc_probe.py [--device cuda]
"""

from __future__ import annotations

import argparse

import torch
from torch.nn import functional

SHAPES = {"fp32": 1024, "tf32": 1536, "bf16": 2048, "fp16": 2560}  # one GEMM size each


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    device = torch.device(parser.parse_args().device)
    for precision, n in SHAPES.items():
        tf32 = precision == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
        a = torch.randn(n, n, device=device, dtype=dtype)
        images = torch.randn(32, 64, 56, 56, device=device, dtype=dtype)
        weight = torch.randn(128, 64, 3, 3, device=device, dtype=dtype)
        q = torch.randn(4, 8, 512, 64, device=device, dtype=dtype)
        for _ in range(2):
            a @ a
            functional.conv2d(images, weight, padding=1)
            functional.scaled_dot_product_attention(q, q, q, is_causal=True)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        print(f"tc probe {precision}: done")


if __name__ == "__main__":
    main()

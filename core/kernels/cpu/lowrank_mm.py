"""A low-rank head's logits over the whole vocabulary on the CPU (lowrank_mm.c): z [n, r] @ W_upᵀ -> fp32 [n, V],
W_up read once per call, since torch's fp32 product (oneDNN's small-m sgemm) reads it once per row of z and its bf16
one has no fast path without AVX512-BF16. Its reference is the fp64 product (tests); which variant runs:
isa.lowrank_variant()."""
import torch

from core.kernels.cpu import cpu_layer, isa

LANES = 16  # vocabulary rows per packed block: one fp32 zmm, two ymm


class PackedUp:
    """W_up [V, r] in lowrank_mm's layout: blocks of 16 rows transposed, [ceil(V / 16), r, 16], zero rows past V;
    bf16 where every value of W_up is one (the model's own factors), else fp32."""

    def __init__(self, up: torch.Tensor, variant: str):
        self.V, self.r = up.shape
        self.isa = isa.LOWRANK[variant]
        exact = up.dtype == torch.bfloat16 or torch.equal(up.bfloat16().to(up.dtype), up)
        dtype = torch.bfloat16 if exact else torch.float32
        pad = torch.zeros((-self.V) % LANES, self.r, dtype=dtype)
        rows = torch.cat([up.to(dtype), pad])
        self.blocks = rows.view(-1, LANES, self.r).transpose(1, 2).contiguous()  # [V/16, 16, r] -> [V/16, r, 16]
        self.wide = int(dtype == torch.float32)

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """z [n, r] -> fp32 logits [n, V]."""
        z = z.float().contiguous()
        if z.dim() != 2 or z.shape[1] != self.r:
            raise ValueError(f"lowrank_mm: z {tuple(z.shape)} does not match W_up's rank {self.r}")
        lib = cpu_layer.lib()
        if lib is None:  # turned off since packing (SPECLENS_CPU_KERNELS=0): the same sums, torch's order
            return torch.einsum("nk,bkj->nbj", z, self.blocks.float()).reshape(z.shape[0], -1)[:, :self.V]
        y = torch.empty(z.shape[0], self.V)
        if z.shape[0]:
            lib.lowrank_mm(self.isa, z.data_ptr(), z.shape[0], self.r, self.blocks.data_ptr(), self.wide,
                           self.V, y.data_ptr(), torch.get_num_threads())
        return y


def packed(up: torch.Tensor) -> PackedUp | None:
    """W_up packed for the variant that runs here, or None (a GPU tensor, no kernel library, SPECLENS_CPU_ISA=none)."""
    variant = isa.lowrank_variant() if up.device.type == "cpu" and cpu_layer.lib() is not None else ""
    return PackedUp(up, variant) if variant else None

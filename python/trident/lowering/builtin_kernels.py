"""Triton kernels trident writes itself, for ATen ops whose host cost at decode sizes (TensorIterator
set-up, ~4-10 µs over the launch on an H200 host) is larger than the work: a strided copy (also a
contiguous clone's), a one-position index_copy_, a same-shape add and adding a number (floating or
integer tensors), a same-shape product and multiplying by a number (floating tensors), choosing
between a tensor and a number by a mask (where), dtype conversions that round once, relu, and the
rotary embedding as HF models write it. builtin_lower.py and
builtin_rotary.py send them only the cases where they compute exactly what the ATen ops compute (see
there)."""
import triton
import triton.language as tl


@triton.jit
def _index4(offs, s1, s2, s3):
    """The 4-D index [_, s1, s2, s3] (row-major) of flat offsets."""
    i3 = offs % s3
    t = offs // s3
    i2 = t % s2
    t = t // s2
    i1 = t % s1
    i0 = t // s1
    return i0, i1, i2, i3


@triton.jit
def strided_copy(dst, src, n, s1, s2, s3, d0, d1, d2, d3, r0, r1, r2, r3, BLOCK: tl.constexpr):
    """dst[i] = src[i] over the index space [n / (s1 s2 s3), s1, s2, s3]; d* and r* are the element
    strides of dst and src. Same dtype on both sides: a bit-exact copy."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    i0, i1, i2, i3 = _index4(offs, s1, s2, s3)
    v = tl.load(src + i0 * r0 + i1 * r1 + i2 * r2 + i3 * r3, mask=m)
    tl.store(dst + i0 * d0 + i1 * d1 + i2 * d2 + i3 * d3, v, mask=m)


@triton.jit
def strided_copy_pair(dst0, src0, dst1, src1, n, s1, s2, s3, d0, d1, d2, d3, r0, r1, r2, r3,
                      e0, e1, e2, e3, q0, q1, q2, q3, BLOCK: tl.constexpr):
    """Two independent strided copies of one shape and dtype in one launch (a KV-cache write of k
    and of v): program_id(1) 0 copies src0 (strides r*) to dst0 (d*), 1 src1 (q*) to dst1 (e*)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    i0, i1, i2, i3 = _index4(offs, s1, s2, s3)
    if tl.program_id(1) == 0:
        v = tl.load(src0 + i0 * r0 + i1 * r1 + i2 * r2 + i3 * r3, mask=m)
        tl.store(dst0 + i0 * d0 + i1 * d1 + i2 * d2 + i3 * d3, v, mask=m)
    else:
        v = tl.load(src1 + i0 * q0 + i1 * q1 + i2 * q2 + i3 * q3, mask=m)
        tl.store(dst1 + i0 * e0 + i1 * e1 + i2 * e2 + i3 * e3, v, mask=m)


@triton.jit
def index_copy_pair(dst0, src0, index0, dst1, src1, index1, n, s1, s2, s3, d0, d1, d2, d3, r0, r1, r2, r3,
                    e0, e1, e2, e3, q0, q1, q2, q3, step0, step1, dim_size, BLOCK: tl.constexpr):
    """dst.index_copy_(dim, index, src) for a one-element index (a decode step's cache write at
    the position a device tensor holds), two such in one launch: program_id(1) 0 copies src0
    (strides r*) to dst0 (d*) at index0[0], 1 src1 (q*) to dst1 (e*) at index1[0]; one launch of
    grid y 1 does the first alone. The index space [n / (s1 s2 s3), s1, s2, s3] is src's, whose
    size along `dim` is 1; step* is dst's stride along `dim` and dim_size its size there. An index
    out of [0, dim_size) fails the device assert ATen's kernel has (compiled with debug)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    i0, i1, i2, i3 = _index4(offs, s1, s2, s3)
    if tl.program_id(1) == 0:
        idx = tl.load(index0)
        tl.device_assert((idx >= 0) & (idx < dim_size), "index_copy_(): index out of bounds")
        v = tl.load(src0 + i0 * r0 + i1 * r1 + i2 * r2 + i3 * r3, mask=m)
        tl.store(dst0 + i0 * d0 + i1 * d1 + i2 * d2 + i3 * d3 + idx * step0, v, mask=m)
    else:
        idx = tl.load(index1)
        tl.device_assert((idx >= 0) & (idx < dim_size), "index_copy_(): index out of bounds")
        v = tl.load(src1 + i0 * q0 + i1 * q1 + i2 * q2 + i3 * q3, mask=m)
        tl.store(dst1 + i0 * e0 + i1 * e1 + i2 * e2 + i3 * e3 + idx * step1, v, mask=m)


@triton.jit
def add_contiguous(a, b, out, n, BLOCK: tl.constexpr):
    """out = a + b, all contiguous with n elements of one dtype (fp16, bf16 or fp32), computed in
    fp32 and rounded to nearest even: ATen's add with alpha 1 (its opmath is fp32 for these)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(a + offs, mask=m).to(tl.float32)
    y = tl.load(b + offs, mask=m).to(tl.float32)
    tl.store(out + offs, (x + y).to(out.dtype.element_ty), mask=m)


@triton.jit
def add_scalar(a, s, out, n, BLOCK: tl.constexpr):
    """out = a + s for a contiguous fp16/bf16/fp32 tensor of n elements and a Python number s taken
    as fp32 (builtin_lower._as_opmath), computed in fp32 and rounded to nearest even: ATen's CUDA add
    of a tensor and a Python number with alpha 1."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(a + offs, mask=m).to(tl.float32)
    tl.store(out + offs, (x + s).to(out.dtype.element_ty), mask=m)


@triton.jit
def mul_contiguous(a, b, out, n, BLOCK: tl.constexpr):
    """out = a * b, all contiguous with n elements of one dtype (fp16, bf16 or fp32), computed in
    fp32 and rounded to nearest even: ATen's CUDA mul (its opmath is fp32 for these). HF's MLP
    multiplies act(gate) by up this way."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(a + offs, mask=m).to(tl.float32)
    y = tl.load(b + offs, mask=m).to(tl.float32)
    tl.store(out + offs, (x * y).to(out.dtype.element_ty), mask=m)


@triton.jit
def mul_scalar(a, s, out, n, BLOCK: tl.constexpr):
    """out = a * s for a contiguous fp16/bf16/fp32 tensor of n elements and a Python number s taken
    as fp32 (builtin_lower._as_opmath), computed in fp32 and rounded to nearest even: ATen's CUDA mul
    of a tensor and a Python number (HF's rotary cos and sin times attention_scaling)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(a + offs, mask=m).to(tl.float32)
    tl.store(out + offs, (x * s).to(out.dtype.element_ty), mask=m)


@triton.jit
def where_scalar(mask, x, s, out, n, x_step, NUMBER_WHERE_TRUE: tl.constexpr, BLOCK: tl.constexpr):
    """out = where(mask, s, x) (NUMBER_WHERE_TRUE) or where(mask, x, s) for a contiguous bool mask and
    out of n elements, x of out's fp16/bf16/fp32 dtype either contiguous alike (x_step 1) or one
    element broadcast (x_step 0, a 0-dim tensor), and s a Python number already rounded to out's
    dtype on the host (builtin_lower._where), so that its conversion here is exact: ATen's
    where.ScalarSelf / ScalarOther, x's elements stored as loaded (NaN payloads included). HF's
    attention mask conversion, where(mask, 0.0, min)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    c = tl.load(mask + offs, mask=m) != 0
    v = tl.load(x + offs * x_step, mask=m)
    number = tl.full([BLOCK], s, v.dtype)
    if NUMBER_WHERE_TRUE:
        tl.store(out + offs, tl.where(c, number, v), mask=m)
    else:
        tl.store(out + offs, tl.where(c, v, number), mask=m)


@triton.jit
def convert(a, out, n, BLOCK: tl.constexpr):
    """out = a converted to out's dtype, both contiguous with n elements, for the conversions that
    round at most once (builtin_lower._CONVERSIONS): fp32 to bf16/fp16 by the device's
    round-to-nearest-even conversion, as ATen's CUDA copy converts; bf16/fp16 to fp32 (exact);
    int32/int64 to fp32 (rounded to nearest even, as the device's conversion ATen uses). HF's rotary
    takes its positions to fp32 and its cos and sin to the model's dtype this way."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(a + offs, mask=m).to(out.dtype.element_ty), mask=m)


@triton.jit
def add_int(a, b, out, n, b_step, BLOCK: tl.constexpr):
    """out = a + b for contiguous a and out of n elements of one integer dtype (int32 or int64), b of
    that dtype either contiguous alike (b_step 1) or one element broadcast (b_step 0, a 0-dim
    tensor): integer addition, wrapping on overflow as ATen's does (a cache position plus its
    layer's 0-dim offset)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(a + offs, mask=m) + tl.load(b + offs * b_step, mask=m), mask=m)


@triton.jit
def add_int_scalar(a, s, out, n, BLOCK: tl.constexpr):
    """out = a + s for a contiguous int32/int64 tensor of n elements and a Python int s that fits the
    tensor's dtype (builtin_lower._add): ATen's integer add of a tensor and a number, wrapping."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, (tl.load(a + offs, mask=m) + s).to(out.dtype.element_ty), mask=m)


@triton.jit
def relu(a, out, n, BLOCK: tl.constexpr):
    """out = relu(a) for a contiguous fp16/bf16/fp32 tensor of n elements, as ATen's CUDA relu
    (clamp_min(a, 0)) computes it: a NaN comes back as it went in, payload and sign kept; any other
    value is max(float(a), 0.0) by the device's fp32 max, which returns one of its inputs, so the
    conversion back is exact."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(a + offs, mask=m)
    y = tl.maximum(x.to(tl.float32), 0.0).to(x.dtype)
    tl.store(out + offs, tl.where(x != x, x, y), mask=m)


@triton.jit
def rotate_half_rotary(x, c, sn, out, n, s1, s2, s3, x0, x1, x2, x3, c0, c1, c2, c3, t0, t1, t2, t3,
                       o0, o1, o2, o3, HALF, BLOCK: tl.constexpr):
    """out = x * c + rotate_half(x) * sn over the index space [n / (s1 s2 s3), s1, s2, s3], where
    rotate_half(x)[..., i] is -x[..., i + HALF] below HALF and x[..., i - HALF] from it; x*, c*, t*
    and o* are the element strides of x, c, sn and out (0 where c or sn broadcasts). fp16/bf16 only:
    each product is computed in fp32 and rounded to the tensor's dtype, as ATen's mul kernel rounds
    its result, and so is their sum, as ATen's add rounds it (negation and the halves' swap are
    exact): ATen's five kernels' values, bit for bit, when compiled with enable_fp_fusion=False
    (builtin_rotary.py; with contraction a product's rounding is folded into an fma)."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    i0, i1, i2, i3 = _index4(offs, s1, s2, s3)
    row = i0 * x0 + i1 * x1 + i2 * x2
    low = i3 < HALF
    xv = tl.load(x + row + i3 * x3, mask=m)
    other = tl.load(x + row + tl.where(low, i3 + HALF, i3 - HALF) * x3, mask=m).to(tl.float32)
    rot = tl.where(low, other * -1.0, other)  # ATen's neg: -0.0 from 0.0 (a subtraction from 0 gives +0.0)
    cv = tl.load(c + i0 * c0 + i1 * c1 + i2 * c2 + i3 * c3, mask=m)
    sv = tl.load(sn + i0 * t0 + i1 * t1 + i2 * t2 + i3 * t3, mask=m)
    dt = out.dtype.element_ty
    a = (xv.to(tl.float32) * cv.to(tl.float32)).to(dt)
    b = (rot * sv.to(tl.float32)).to(dt)
    tl.store(out + i0 * o0 + i1 * o1 + i2 * o2 + i3 * o3, (a.to(tl.float32) + b.to(tl.float32)).to(dt), mask=m)

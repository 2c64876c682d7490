"""The host AdamW update as one hand-vectorized C loop over a whole FSDP2 group.

    for every element of every tensor of the group, in one pass over memory:
        g = float(grad) * sign                       (grad fp32 or bf16: 4 or 2 B read)
        m = fma(1 - beta1, g - m, m)                 (8 B)
        v = fma((1 - beta2) * g, g, v * beta2)       (8 B)
        w = w * (1 - lr * wd) + (-lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps)   (8 B)
        out = bf16(w), round to nearest even         (2 B written, only for bf16 shards)

torch's fused CPU AdamW (``torch._fused_adamw_``) needs the gradient in the parameter's dtype
and writes only the parameter: a bf16 shard with an fp32 master costs it three passes (gradient
cast, update, bf16 cast-out), ~40 B/element against this loop's 28. Inductor's compiled form of
the same loop moved 72 GB/s on the H100 host against the fused kernel's 126 GB/s and compiled
for 69 s (docs/params.md), so the loop is written here in C: ~70 lines, compiled once per host
by the system C compiler (``cc -O3 -march=native -fopenmp``, ~1 s) into ``MEMOPT_CACHE_DIR`` and
called through ctypes, which releases the GIL for the call. The arithmetic is torch's fused
kernel's, operation for operation (the same roundings), so the update is bitwise torch's on CPUs
with FMA, except in the last ``numel % vector width`` elements of a tensor, which torch updates
in a scalar loop that may round ``v`` differently (by an ulp). The elements of all the group's
tensors are handed out in pieces to ``threads`` OpenMP threads (``num_threads`` is passed per call,
so the worker's team size needs no per-thread setting).

:func:`load` returns None when no compiler or no OpenMP is available (``kernel="auto"`` then
falls back to torch's fused kernel); ``kernel="native"`` raises :class:`NativeKernelError`
with the compiler's message.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import threading

import torch

_SRC = r"""
#include <stdint.h>
#include <string.h>
#include <math.h>

#define HP 8

static inline float bf2f(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t f2bf(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    uint16_t r = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    return (f != f) ? (uint16_t)0x7fc0 : r;
}

/* torch's fused CPU AdamW (ADAMW mode, vector path) operation for operation, so results are
   bitwise equal on CPUs with FMA: m by torch's lerp (from m when 1 - beta1 < 0.5, else from
   g), v by a fused multiply-add (torch's build contracts its product and sum), nothing else
   contracted (-ffp-contract=off). */
#define ADAMW_LOOP(GRAD, STORE)                                                        \
    for (int64_t i = a; i < b; i++) {                                                  \
        float gi = (GRAD) * sign;                                                      \
        float mi = small ? fmaf(c1, gi - m[i], m[i]) : fmaf(c1m1, gi - m[i], gi);       \
        float vi = fmaf(c2 * gi, gi, v[i] * b2);                                       \
        float wi = w[i] * decay + nss * mi / (sqrtf(vi) / bc2 + eps);                  \
        m[i] = mi; v[i] = vi; w[i] = wi; STORE;                                        \
    }

/* hp: 1 - beta1, beta2, 1 - beta2, eps, 1 - lr * wd, -lr / bc1, sqrt(bc2), sign (each
   computed in double and rounded to float once, as torch does) */
static void span(float *restrict w, const void *g, int gk, float *restrict m,
                 float *restrict v, uint16_t *restrict out, int64_t a, int64_t b,
                 const float *hp) {
    const float c1 = hp[0], b2 = hp[1], c2 = hp[2], eps = hp[3], decay = hp[4], nss = hp[5],
                bc2 = hp[6], sign = hp[7], c1m1 = c1 - 1.0f;
    const int small = fabsf(c1) < 0.5f; /* torch's lerp: from m when the weight is small */
    const float *restrict gf = (const float *)g;
    const uint16_t *restrict gh = (const uint16_t *)g;
    if (gk == 0 && out == 0) { ADAMW_LOOP(gf[i], (void)0) }
    else if (gk == 0) { ADAMW_LOOP(gf[i], out[i] = f2bf(wi)) }
    else if (out == 0) { ADAMW_LOOP(bf2f(gh[i]), (void)0) }
    else { ADAMW_LOOP(bf2f(gh[i]), out[i] = f2bf(wi)) }
}

/* The elements of k tensors split evenly over at most nt threads (64-element aligned pieces,
   at least 32 Ki elements a thread): sets *nt and *total, returns the piece size. */
static int64_t split(int k, const int64_t *n, int *nt, int64_t *total) {
    int64_t t = 0;
    for (int i = 0; i < k; i++) t += n[i];
    *total = t;
    int64_t most = t / 32768 + 1;
    if (*nt > most) *nt = (int)most;
    if (*nt < 1) *nt = 1;
    return ((t + *nt - 1) / *nt + 63) & ~(int64_t)63;
}

/* thread t's piece: BODY for each tensor i's part [a, b) of it (offsets within tensor i) */
#define FOR_PIECE(t, per, total, k, n, BODY)                                           \
    {                                                                                  \
        int64_t lo = (int64_t)(t) * (per), hi = lo + (per), base = 0;                  \
        if (hi > (total)) hi = (total);                                                \
        for (int i = 0; i < (k) && base < hi; base += (n)[i], i++) {                   \
            int64_t a = lo > base ? lo : base, b = hi < base + (n)[i] ? hi : base + (n)[i]; \
            if (a < b) { a -= base; b -= base; BODY; }                                 \
        }                                                                              \
    }

/* k tensors, their elements in 256 Ki-element pieces handed to nt threads as they free up:
   the update shares the host with the threads that launch GPU work, and with a static split
   one descheduled thread holds up the whole call (elementwise: the same numbers either way) */
#define PIECE ((int64_t)1 << 18)
void memopt_adamw(int k, float **w, void **g, const int *gk, float **m, float **v,
                  uint16_t **out, const int64_t *n, const float *hp, int nt) {
    int64_t total;
    split(k, n, &nt, &total);
    if (total == 0) return;
    int64_t pieces = (total + PIECE - 1) / PIECE;
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int64_t t = 0; t < pieces; t++)
        FOR_PIECE(t, PIECE, total, k, n, span(w[i], g[i], gk[i], m[i], v[i], out[i], a, b, hp + HP * i))
}

/* fp32 gradient buffers of bf16 host shards (memopt.params.grad_acc), one pass:
   a = mode 0: acc[i]; 1: float(src[i]); 2: acc[i] where bf16(acc[i]) == src[i] (else float(src[i])
   and counted as changed); then a += float(add[i]) if add; acc[i] = a;
   out[i] = bf16(a) if out. Returns the changed count. */
static int64_t acc_span(float *restrict acc, const uint16_t *src, int mode, const uint16_t *add,
                        uint16_t *out, int64_t a, int64_t b) {
    int64_t changed = 0;
    for (int64_t i = a; i < b; i++) {
        float x = acc[i];
        if (mode == 1) x = bf2f(src[i]);
        else if (mode == 2 && f2bf(x) != src[i]) { x = bf2f(src[i]); changed++; }
        if (add) x = x + bf2f(add[i]);
        acc[i] = x;
        if (out) out[i] = f2bf(x);
    }
    return changed;
}

/* k buffers in one parallel region (one OpenMP team wake-up for a whole set of tensors) */
int64_t memopt_acc(int k, float **acc, uint16_t **src, int mode, uint16_t **add,
                   uint16_t **out, const int64_t *n, int nt) {
    int64_t changed = 0, total, per = split(k, n, &nt, &total);
    if (total == 0) return 0;
#pragma omp parallel for num_threads(nt) schedule(static, 1) reduction(+:changed)
    for (int t = 0; t < nt; t++)
        FOR_PIECE(t, per, total, k, n,
                  changed += acc_span(acc[i], src ? src[i] : 0, mode, add ? add[i] : 0,
                                      out ? out[i] : 0, a, b))
    return changed;
}

/* sum of squares in double of x[a, b) (fp32, or bf16 when xk): 32 lanes (independent add
   chains, so the vector units are not waiting on one), then the tail */
#define SQ_LANES 32
static double sq_span(const void *x, int xk, int64_t a, int64_t b) {
    double s[SQ_LANES] = {0}, r = 0;
    const float *f = (const float *)x;
    const uint16_t *h = (const uint16_t *)x;
    int64_t i = a;
    if (xk) {
        for (; i + SQ_LANES <= b; i += SQ_LANES)
            for (int j = 0; j < SQ_LANES; j++) {
                uint32_t u = (uint32_t)h[i + j] << 16;
                float y;
                memcpy(&y, &u, 4);
                s[j] += (double)y * (double)y;
            }
        for (; i < b; i++) { double y = bf2f(h[i]); r += y * y; }
    } else {
        for (; i + SQ_LANES <= b; i += SQ_LANES)
            for (int j = 0; j < SQ_LANES; j++) s[j] += (double)f[i + j] * (double)f[i + j];
        for (; i < b; i++) { double y = f[i]; r += y * y; }
    }
    for (int j = 0; j < SQ_LANES; j++) r += s[j];
    return r;
}

/* the sum of squares of k tensors' elements, in double; the threads' sums are added in thread
   order, so the result depends only on the inputs and nt */
double memopt_sumsq(int k, void **x, const int *xk, const int64_t *n, int nt) {
    int64_t total, per = split(k, n, &nt, &total);
    double part[256] = {0}, r = 0;
    if (total == 0) return 0.0;
    if (nt > 256) nt = 256;
    per = ((total + nt - 1) / nt + 63) & ~(int64_t)63;
#pragma omp parallel for num_threads(nt) schedule(static, 1)
    for (int t = 0; t < nt; t++) {
        double s = 0;
        FOR_PIECE(t, per, total, k, n, s += sq_span(x[i], xk[i], a, b))
        part[t] = s;
    }
    for (int t = 0; t < nt; t++) r += part[t];
    return r;
}
"""

_FLAGS = ("-O3", "-march=native", "-fopenmp", "-fPIC", "-shared", "-fno-math-errno", "-std=c11")
_FLAGS += ("-ffp-contract=off",)  # clang contracts by default; torch's rounding is two-step


class NativeKernelError(RuntimeError):
    """The C AdamW loop could not be built or loaded here (no compiler, no OpenMP)."""


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        raise NativeKernelError("no C compiler found (set CC, or install gcc)")
    return cc


def _cpu_signature() -> str:
    """What ``-march=native`` depends on: the machine and its CPU flags."""
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln for ln in f if ln.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return platform.machine() + flags


def _build() -> str:
    from memopt.config import cache_dir

    cc = _compiler()
    try:
        version = subprocess.run(
            [cc, "--version"], capture_output=True, text=True, errors="replace"
        ).stdout
    except OSError as e:
        raise NativeKernelError(f"C compiler {cc!r} does not run: {e}") from e
    key = hashlib.sha256("\0".join([_SRC, cc, version, *_FLAGS, _cpu_signature()]).encode())
    d = os.path.join(cache_dir(), "kernels")
    path = os.path.join(d, f"adamw-{key.hexdigest()[:20]}.so")
    if os.path.exists(path):
        return path
    os.makedirs(d, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=d) as tmp:
        src, lib = os.path.join(tmp, "adamw.c"), os.path.join(tmp, "adamw.so")
        with open(src, "w") as f:
            f.write(_SRC)
        cmd = [cc, *_FLAGS, src, "-o", lib, "-lm"]
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        if r.returncode:
            raise NativeKernelError(f"{cc} failed to build the AdamW loop:\n{r.stderr.strip()}")
        os.replace(lib, path)  # atomic: ranks building at once each see a whole file
    return path


_LIB: list = []  # [CDLL] once built, [NativeKernelError] once failed
_LOCK = threading.Lock()


def load() -> ctypes.CDLL:
    """The built loop (built on the first call), or :class:`NativeKernelError`."""
    with _LOCK:
        if not _LIB:
            try:
                lib = ctypes.CDLL(_build())
                fn = lib.memopt_adamw
                acc = lib.memopt_acc
                sq = lib.memopt_sumsq
            except (NativeKernelError, OSError, AttributeError) as e:
                _LIB.append(e if isinstance(e, NativeKernelError) else NativeKernelError(str(e)))
            else:
                P, i32, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
                fn.argtypes = [i32, P, P, P, P, P, P, P, P, i32]
                fn.restype = None
                acc.argtypes = [i32, P, P, i32, P, P, P, i32]
                acc.restype = i64
                sq.argtypes = [i32, P, P, P, i32]
                sq.restype = ctypes.c_double
                _LIB.extend([fn, acc, sq])
    if isinstance(_LIB[0], NativeKernelError):
        raise _LIB[0]
    return _LIB[0]


def available() -> bool:
    try:
        load()
    except NativeKernelError:
        return False
    return True


def _ptrs(xs) -> ctypes.Array:
    return (ctypes.c_void_p * len(xs))(*xs)


def group_update(ws, gs, ms, vs, outs, hps, threads: int) -> None:
    """Update fp32 ``ws[i]``, ``ms[i]``, ``vs[i]`` in place from ``gs[i]`` (fp32 or bf16);
    ``outs[i]`` (bf16, or None) receives ``ws[i]`` rounded to nearest even; ``hps[i]``: the
    8-float scalar tensor of :meth:`memopt.params.adamw_kernel.AdamWStep.tensor`. All CPU,
    contiguous, same numel per i. One call; the GIL is released while it runs."""
    fn = load()
    k = len(ws)
    if not k:
        return
    for w, g, m, v, o in zip(ws, gs, ms, vs, outs):
        _check(w, g, m, v, o)
    hp = torch.cat([h.reshape(8) for h in hps]).contiguous()
    gk = (ctypes.c_int * k)(*[int(g.dtype == torch.bfloat16) for g in gs])
    n = (ctypes.c_int64 * k)(*[w.numel() for w in ws])
    o = _ptrs([x.data_ptr() if x is not None else None for x in outs])
    fn(k, _ptrs([x.data_ptr() for x in ws]), _ptrs([x.data_ptr() for x in gs]), gk,
       _ptrs([x.data_ptr() for x in ms]), _ptrs([x.data_ptr() for x in vs]), o, n,
       ctypes.c_void_p(hp.data_ptr()), int(threads))  # fmt: skip


def acc_pass(acc, src, mode: int, add=None, out=None, threads: int = 1) -> int:
    """One pass over fp32 gradient buffers ``acc`` (a tensor or a list; see ``memopt_acc`` in
    the C source): ``mode`` 0 keeps ``acc``, 1 takes ``float(src)``, 2 keeps ``acc`` where
    ``src`` (bf16) still equals its rounding, else takes ``src`` (counted); then
    ``+ float(add)``; ``out`` (bf16) gets the rounding. ``src``/``add``/``out``:
    like ``acc`` (or None). Returns the count of changed elements. The GIL is released."""
    load()
    one = isinstance(acc, torch.Tensor)
    accs = [acc] if one else list(acc)
    lists = [None if x is None else ([x] if one else list(x)) for x in (src, add, out)]
    for i, a in enumerate(accs):
        if a.dtype != torch.float32 or not a.is_contiguous() or a.device.type != "cpu":
            raise ValueError("acc_pass takes contiguous fp32 CPU buffers")
        for xs in lists:
            t = None if xs is None else xs[i]
            if xs is not None and (
                t.dtype != torch.bfloat16 or t.numel() != a.numel() or not t.is_contiguous()
            ):
                raise ValueError("acc_pass takes contiguous bf16 src/add/out of acc's sizes")
    k = len(accs)
    n = (ctypes.c_int64 * k)(*[a.numel() for a in accs])
    ptrs = [None if xs is None else _ptrs([t.data_ptr() for t in xs]) for xs in lists]
    fn = _LIB[1]
    got = fn(k, _ptrs([a.data_ptr() for a in accs]), ptrs[0], mode, ptrs[1], ptrs[2], n,
             int(threads))  # fmt: skip
    return int(got)


def sumsq_ok(x: torch.Tensor) -> bool:
    return (
        x.dtype in (torch.float32, torch.bfloat16) and x.is_contiguous() and x.device.type == "cpu"
    )


def sumsq(xs, threads: int = 1) -> float:
    """The sum of squares of the elements of ``xs`` (contiguous fp32 or bf16 CPU tensors),
    accumulated in double: one read of each, the GIL released. Deterministic for a given
    ``threads``."""
    load()
    xs = [x for x in xs if x.numel()]
    if not all(map(sumsq_ok, xs)):
        raise ValueError("sumsq takes contiguous fp32 or bf16 CPU tensors")
    k = len(xs)
    if not k:
        return 0.0
    kinds = (ctypes.c_int * k)(*[int(x.dtype == torch.bfloat16) for x in xs])
    n = (ctypes.c_int64 * k)(*[x.numel() for x in xs])
    return float(_LIB[2](k, _ptrs([x.data_ptr() for x in xs]), kinds, n, int(threads)))


def native_ok(w, g, out, m=None, v=None) -> bool:
    """Whether the loop takes this update: contiguous CPU tensors of one size, an fp32 target
    (and fp32 moments), an fp32 or bf16 gradient, no write-back or a bf16 one (others go to
    torch's kernel)."""

    def ok(t, dtypes) -> bool:
        return (
            t.dtype in dtypes
            and t.device.type == "cpu"
            and t.is_contiguous()
            and t.numel() == w.numel()
        )

    f32 = (torch.float32,)
    return (
        ok(w, f32)
        and ok(g, (torch.float32, torch.bfloat16))
        and (out is None or ok(out, (torch.bfloat16,)))
        and all(ok(t, f32) for t in (m, v) if t is not None)
    )


def _check(w, g, m, v, out) -> None:
    if not native_ok(w, g, out, m, v):
        raise ValueError(
            "the native AdamW takes contiguous CPU tensors of one size: fp32 w, m, v; fp32 or "
            f"bf16 gradient; bf16 write-back or none (got w {w.dtype}, g {g.dtype}, "
            f"out {None if out is None else out.dtype})"
        )

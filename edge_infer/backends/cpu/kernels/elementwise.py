"""Element-wise kernels: unary math and activations, broadcasting binary and
variadic ops, comparisons and logic, Clip and Where.

Ops that are one numpy ufunc are table-driven (``UNARY_UFUNCS``,
``BINARY_UFUNCS``). Composite activations are short chains of ufunc calls
writing into the output buffer (plus a workspace from prepare where one buffer
is not enough), so the eval step allocates nothing.

Inputs of one op share a dtype in ONNX; a constant that disagrees (a float64
literal next to float32 activations) is cast once in prepare, so numpy never
computes in a wider type than the graph says.
"""
from __future__ import annotations

import math
from functools import partial

import numpy as np

from ....memory.pages import private_copy
from ....ops.shapes import operand_dtype
from ..native import ops as native_ops
from ..registry import kernel


def quiet(fn):
    """Run ``fn`` with numpy's floating-point warnings off: inf and nan results
    (log(0), x/0, exp overflow) are the op's defined output, not an error."""
    def run():
        with np.errstate(all="ignore"):
            fn()
    return run


def operands(node, ctx, names=None):
    """The input arrays of ``node`` (None for ''), constants cast to the op's dtype."""
    names = node.inputs if names is None else names
    dt = np.dtype(operand_dtype([ctx.tensor(n) if n else None for n in names]))
    out = []
    for n in names:
        arr = ctx.value(n)
        if arr is not None and ctx.const(n) is not None and arr.dtype != dt:
            arr = arr.astype(dt)
        out.append(arr)
    return out


def _io(node, ctx):
    return ctx.value(node.inputs[0]), ctx.value(node.outputs[0])


def native_unary(node, ctx, op=None, p0=0.0, p1=0.0):
    """The native fp32 step for a unary op (src/elementwise.c), or None where not covered."""
    x, y = _io(node, ctx)
    return native_ops.unary_step(op or node.op, x, y, ctx.threads, p0, p1)


def contiguous_const(ctx, name, arr):
    """A constant operand as a C-contiguous array (made once), for the native kernels; its own
    copy rather than a view of the file map, which every run would fault back in (memory/pages.py)."""
    if arr is not None and ctx.const(name) is not None:
        return private_copy(arr if arr.flags.c_contiguous else np.ascontiguousarray(arr))
    return arr


def native_binary(node, ctx, op, names=None):
    """The native fp32 step for a broadcasting binary op, or None where not covered."""
    names = list(node.inputs if names is None else names)
    a, b = (contiguous_const(ctx, n, v) for n, v in zip(names, operands(node, ctx, names)))
    return native_ops.binary_step(op, a, b, ctx.value(node.outputs[0]), ctx.threads)


# -- unary ----------------------------------------------------------------------------

def negative(x: np.ndarray, out: np.ndarray = None) -> np.ndarray:
    """-x. Not np.negative: numpy 2.4's gives wrong values on some strided views (a (n, 1) column
    of a float32 (n, 4) array, in place or into a strided out; tests/test_kernels_nn.py shows it)."""
    return np.multiply(x, -1, out=out)


UNARY_UFUNCS = {
    "Abs": np.absolute, "Neg": negative, "Sqrt": np.sqrt, "Exp": np.exp, "Log": np.log,
    "Reciprocal": np.reciprocal, "Floor": np.floor, "Ceil": np.ceil,
    "Round": np.rint,             # ONNX Round is round-half-to-even, like rint
    "Sign": np.sign, "Tanh": np.tanh, "Sin": np.sin, "Cos": np.cos, "Tan": np.tan,
    "Asin": np.arcsin, "Acos": np.arccos, "Atan": np.arctan, "Sinh": np.sinh, "Cosh": np.cosh,
    "Asinh": np.arcsinh, "Acosh": np.arccosh, "Atanh": np.arctanh,
    "Not": np.logical_not, "IsNaN": np.isnan, "BitwiseNot": np.invert,
}
# ops whose normal results include inf/nan (and so numpy warnings)
_NOISY_UNARY = {"Sqrt", "Exp", "Log", "Reciprocal", "Tan", "Asin", "Acos", "Sinh", "Cosh",
                "Acosh", "Atanh"}


@kernel(*UNARY_UFUNCS)
def unary(node, ctx):
    fast = native_unary(node, ctx)
    if fast is not None:
        return fast
    x, y = _io(node, ctx)
    step = partial(UNARY_UFUNCS[node.op], x, out=y)
    return quiet(step) if node.op in _NOISY_UNARY else step


@kernel("Identity")
def identity(node, ctx):
    x, y = _io(node, ctx)
    fast = native_ops.copy_step([(y, x)])
    if fast is not None:
        return fast
    return partial(np.copyto, y, x)


@kernel("IsInf")
def isinf(node, ctx):
    x, y = _io(node, ctx)
    neg, pos = node.attrs.get("detect_negative", 1), node.attrs.get("detect_positive", 1)
    if neg and pos:
        return partial(np.isinf, x, out=y)
    if not neg and not pos:
        return partial(y.fill, False)
    inf = np.array(np.inf if pos else -np.inf, x.dtype)
    return partial(np.equal, x, inf, out=y)


@kernel("Relu")
def relu(node, ctx):
    fast = native_unary(node, ctx)
    if fast is not None:
        return fast
    x, y = _io(node, ctx)
    return partial(np.maximum, x, np.zeros((), x.dtype), out=y)


@kernel("LeakyRelu")
def leaky_relu(node, ctx):
    x, y = _io(node, ctx)
    alpha = node.attrs.get("alpha", 0.01)
    fast = native_unary(node, ctx, p0=alpha)
    if fast is not None:
        return fast
    # x if x >= 0 else alpha*x  ==  max(x, alpha*x) for alpha <= 1, min(...) above 1
    pick = np.maximum if alpha <= 1 else np.minimum

    def run():
        np.multiply(x, alpha, out=y)
        pick(x, y, out=y)
    return run


@kernel("PRelu")
def prelu(node, ctx):
    fast = native_binary(node, ctx, "PRelu")
    if fast is not None:
        return fast
    x, slope = operands(node, ctx)
    y = ctx.value(node.outputs[0])
    neg = ctx.workspace(y.shape, y.dtype)

    # the slope's sign is arbitrary, so no max/min trick: max(x,0) + slope*min(x,0)
    def run():
        np.minimum(x, 0, out=neg)
        np.multiply(neg, slope, out=neg)
        np.maximum(x, 0, out=y)
        np.add(y, neg, out=y)
    return run


@kernel("ThresholdedRelu")
def thresholded_relu(node, ctx):
    x, y = _io(node, ctx)
    alpha = np.array(node.attrs.get("alpha", 1.0), x.dtype)
    mask = ctx.workspace(y.shape, "bool")

    def run():
        y.fill(0)
        np.greater(x, alpha, out=mask)
        np.copyto(y, x, where=mask)
    return run


@kernel("Shrink")
def shrink(node, ctx):
    x, y = _io(node, ctx)
    lambd, bias = node.attrs.get("lambd", 0.5), node.attrs.get("bias", 0.0)
    mask = ctx.workspace(y.shape, "bool")

    def run():
        # x+bias below -lambd, x-bias above lambd, 0 between
        y.fill(0)
        np.less(x, -lambd, out=mask)
        np.add(x, bias, out=y, where=mask)
        np.greater(x, lambd, out=mask)
        np.subtract(x, bias, out=y, where=mask)
    return run


@kernel("Sigmoid")
def sigmoid(node, ctx):
    fast = native_unary(node, ctx)
    if fast is not None:
        return fast
    x, y = _io(node, ctx)

    def run():
        # 1/(1+exp(-x)): exp overflowing to inf gives exactly 0, as it should
        negative(x, out=y)
        np.exp(y, out=y)
        np.add(y, 1, out=y)
        np.reciprocal(y, out=y)
    return quiet(run)


@kernel("HardSigmoid", "HardSwish")
def hard_sigmoid(node, ctx):
    x, y = _io(node, ctx)
    if node.op == "HardSwish":
        alpha, beta = 1 / 6, 0.5
    else:
        alpha, beta = node.attrs.get("alpha", 0.2), node.attrs.get("beta", 0.5)
    fast = native_unary(node, ctx, p0=alpha, p1=beta)
    if fast is not None:
        return fast
    swish = node.op == "HardSwish"
    zero, one = np.zeros((), x.dtype), np.ones((), x.dtype)

    def run():
        np.multiply(x, alpha, out=y)
        np.add(y, beta, out=y)
        np.maximum(y, zero, out=y)
        np.minimum(y, one, out=y)
        if swish:
            np.multiply(y, x, out=y)
    return run


def _softplus_into(x, y, pos):
    """y = log(1 + exp(x)), computed as max(x,0) + log1p(exp(-|x|)) so it never overflows."""
    np.maximum(x, 0, out=pos)       # first: x is not read once y is written (in-place safe)
    np.absolute(x, out=y)
    negative(y, out=y)
    np.exp(y, out=y)
    np.log1p(y, out=y)
    np.add(y, pos, out=y)


@kernel("Softplus")
def softplus(node, ctx):
    x, y = _io(node, ctx)
    pos = ctx.scratch("unary_tmp", y.shape, y.dtype)       # rewritten every run before it is read
    return quiet(partial(_softplus_into, x, y, pos))


@kernel("Mish")
def mish(node, ctx):
    x, y = _io(node, ctx)
    pos = ctx.scratch("unary_tmp", y.shape, y.dtype)       # rewritten every run before it is read

    def run():
        _softplus_into(x, y, pos)
        np.tanh(y, out=y)
        np.multiply(y, x, out=y)
    return quiet(run)


@kernel("Softsign")
def softsign(node, ctx):
    x, y = _io(node, ctx)

    def run():
        np.absolute(x, out=y)
        np.add(y, 1, out=y)
        np.divide(x, y, out=y)
    return run


@kernel("Elu", "Selu", "Celu")
def elu(node, ctx):
    """Elu, Selu and Celu: scale * (max(x,0) + alpha*expm1(min(x,0)/div))."""
    x, y = _io(node, ctx)
    if node.op == "Selu":
        alpha = node.attrs.get("alpha", 1.67326319217681884765625)
        scale = node.attrs.get("gamma", 1.05070102214813232421875)
        div = 1.0
    else:
        alpha = node.attrs.get("alpha", 1.0)
        scale = 1.0
        div = alpha if node.op == "Celu" else 1.0
    neg = ctx.workspace(y.shape, y.dtype)

    def run():
        np.minimum(x, 0, out=neg)
        if div != 1.0:
            np.divide(neg, div, out=neg)
        np.expm1(neg, out=neg)
        np.multiply(neg, alpha, out=neg)
        np.maximum(x, 0, out=y)
        np.add(y, neg, out=y)
        if scale != 1.0:
            np.multiply(y, scale, out=y)
    return quiet(run)


# erf: numpy has none, and the runtime depends on numpy alone.
#
# float32/float16 inputs: the rational approximation Eigen, XLA and TVM use,
# erf(x) = x P(x^2) / Q(x^2) on x clamped to [-4, 4] (erf is +-1 in float32
# beyond), evaluated in float32: about 30 float32 passes, errors of a few ulp.
_ERF_P = [-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02]
_ERF_Q = [-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02]
# float64 inputs: a Taylor series below |x| = 0.5, above it 1 - erfc(|x|) with the
# Numerical Recipes Chebyshev fit (relative error < 1.2e-7 in erfc, so in erf too).
_ERF_TAYLOR = [2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))
               for n in range(12)]
_ERFC_CHEB = [-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807,
              -1.13520398, 1.48851587, -0.82215223, 0.17087277]


def _horner(acc, z, coefs):
    """acc = polynomial in z with ``coefs`` (highest degree first), in place."""
    acc.fill(coefs[0])
    for c in coefs[1:]:
        np.multiply(acc, z, out=acc)
        np.add(acc, c, out=acc)


def make_erf(ctx, shape, dtype):
    """A function ``erf(x, scale)`` -> erf(x*scale) in a workspace of the compute dtype
    (float64 for float64 inputs, else float32); buffers are made here, once."""
    if np.dtype(dtype) != np.float64:
        v, z, p, q = (ctx.workspace(shape, "float32") for _ in range(4))

        def erf32(x, scale=1.0):
            np.multiply(x, scale, out=v)
            np.minimum(v, 4.0, out=v)              # nan stays nan
            np.maximum(v, -4.0, out=v)
            np.multiply(v, v, out=z)
            _horner(p, z, _ERF_P)
            np.multiply(p, v, out=p)
            _horner(q, z, _ERF_Q)
            np.divide(p, q, out=p)
            np.minimum(p, 1.0, out=p)              # the fit overshoots 1 by an ulp near 4
            np.maximum(p, -1.0, out=p)
            return p
        return erf32

    a, t, p, q = (ctx.workspace(shape, "float64") for _ in range(4))
    small = ctx.workspace(shape, "bool")

    def erf64(x, scale=1.0):
        with np.errstate(all="ignore"):
            np.multiply(x, scale, out=a)
            np.absolute(a, out=a)
            np.square(a, out=q)
            # large |x|: 1 - t*exp(-x^2 + poly(t)), t = 1/(1 + |x|/2)
            np.multiply(a, 0.5, out=t)
            np.add(t, 1.0, out=t)
            np.reciprocal(t, out=t)
            _horner(p, t, _ERFC_CHEB[::-1])
            np.subtract(p, q, out=p)
            np.exp(p, out=p)
            np.multiply(p, t, out=p)
            np.subtract(1.0, p, out=p)
            # small |x|: the series in x^2 (t is free again)
            np.less(a, 0.5, out=small)
            _horner(t, q, _ERF_TAYLOR[::-1])
            np.multiply(t, a, out=t)
            np.copyto(p, t, where=small)
            np.copysign(p, x, out=p)
        return p
    return erf64


@kernel("Erf")
def erf_kernel(node, ctx):
    x, y = _io(node, ctx)
    erf = make_erf(ctx, y.shape, y.dtype)

    def run():
        np.copyto(y, erf(x), casting="same_kind")
    return run


@kernel("Gelu")
def gelu(node, ctx):
    x, y = _io(node, ctx)
    tanh_form = node.attrs.get("approximate", "none") == "tanh"
    fast = native_unary(node, ctx, "GeluTanh" if tanh_form else "Gelu")
    if fast is not None:
        return fast
    if tanh_form:
        c = math.sqrt(2 / math.pi)

        def run():
            # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
            np.multiply(x, x, out=y)
            np.multiply(y, 0.044715, out=y)
            np.add(y, 1, out=y)
            np.multiply(y, x, out=y)
            np.multiply(y, c, out=y)
            np.tanh(y, out=y)
            np.add(y, 1, out=y)
            np.multiply(y, x, out=y)
            np.multiply(y, 0.5, out=y)
        return run
    erf = make_erf(ctx, y.shape, y.dtype)
    s = 1 / math.sqrt(2)

    def run():
        # 0.5 x (1 + erf(x / sqrt 2)), finished in the compute dtype, rounded once;
        # x is read to the end, y written only last (so y may alias x)
        p = erf(x, s)
        np.add(p, 1.0, out=p)
        np.multiply(p, x, out=p)
        np.multiply(p, 0.5, out=p)
        np.copyto(y, p, casting="same_kind")
    return run


@kernel("Clip")
def clip(node, ctx):
    names = list(node.inputs) + [""] * (3 - len(node.inputs))
    x, lo, hi = operands(node, ctx, names[:3])
    y = ctx.value(node.outputs[0])
    # max then min: when min > max every value becomes max, as ONNX specifies
    if all(v is None or (ctx.const(n) is not None and v.size == 1) for n, v in zip(names[1:3], (lo, hi))):
        fast = native_unary(node, ctx, "Clip", -np.inf if lo is None else float(lo.reshape(-1)[0]),
                            np.inf if hi is None else float(hi.reshape(-1)[0]))
        if fast is not None:
            return fast
    if lo is None and hi is None:
        return partial(np.copyto, y, x)
    if lo is None:
        return partial(np.minimum, x, hi, out=y)
    if hi is None:
        return partial(np.maximum, x, lo, out=y)

    def run():
        np.maximum(x, lo, out=y)
        np.minimum(y, hi, out=y)
    return run


# -- binary and variadic ---------------------------------------------------------------

BINARY_UFUNCS = {
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
    "Equal": np.equal, "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or,
    "Xor": np.logical_xor, "BitwiseAnd": np.bitwise_and, "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
}
_NOISY_BINARY = {"Add", "Sub", "Mul"}     # float overflow to inf, inf - inf


@kernel(*BINARY_UFUNCS)
def binary(node, ctx):
    fast = native_binary(node, ctx, node.op)
    if fast is not None:
        return fast
    a, b = operands(node, ctx)
    y = ctx.value(node.outputs[0])
    step = partial(BINARY_UFUNCS[node.op], a, b, out=y)
    return quiet(step) if node.op in _NOISY_BINARY and y.dtype.kind == "f" else step


@kernel("Div")
def div(node, ctx):
    fast = native_binary(node, ctx, "Div")
    if fast is not None:
        return fast
    a, b = operands(node, ctx)
    y = ctx.value(node.outputs[0])
    if y.dtype.kind != "i":
        # floats divide; unsigned floor division already truncates toward zero
        f = np.divide if y.dtype.kind == "f" else np.floor_divide
        return quiet(partial(f, a, b, out=y))
    # signed ints truncate toward zero (C, onnxruntime), not floor like numpy:
    # a - fmod(a, b) is an exact multiple of b, so flooring it divides exactly
    rem = ctx.workspace(y.shape, y.dtype)

    def run():
        np.fmod(a, b, out=rem)
        np.subtract(a, rem, out=rem)
        np.floor_divide(rem, b, out=y)
    return quiet(run)


@kernel("Mod")
def mod(node, ctx):
    a, b = operands(node, ctx)
    y = ctx.value(node.outputs[0])
    # fmod=1: the sign of the dividend (C fmod); fmod=0: the sign of the divisor (Python %)
    f = np.fmod if node.attrs.get("fmod", 0) else np.mod
    return quiet(partial(f, a, b, out=y))


@kernel("Pow")
def power(node, ctx):
    x, e = ctx.value(node.inputs[0]), ctx.value(node.inputs[1])
    y = ctx.value(node.outputs[0])
    ce = ctx.const(node.inputs[1])
    if ce is not None and x.dtype.kind == "f":
        e = ce.astype(x.dtype)
        if e.size == 1 and e.reshape(-1)[0] == 2:
            return partial(np.square, x, out=y)       # exact, and much cheaper than pow
    if y.dtype.kind in "iu" and np.dtype(e.dtype).kind == "f":
        # int base, float exponent: pow in float64, truncated back (as onnxruntime does)
        tmp = ctx.workspace(y.shape, "float64")

        def run():
            np.power(x, e, out=tmp, dtype="float64")
            np.copyto(y, tmp, casting="unsafe")
        return quiet(run)
    return quiet(partial(np.power, x, e, out=y, casting="same_kind"))


@kernel("BitShift")
def bit_shift(node, ctx):
    a, b = operands(node, ctx)
    y = ctx.value(node.outputs[0])
    f = np.left_shift if node.attrs.get("direction", "LEFT") == "LEFT" else np.right_shift
    return partial(f, a, b, out=y)


_VARIADIC = {"Sum": np.add, "Mean": np.add, "Max": np.maximum, "Min": np.minimum}


@kernel(*_VARIADIC)
def variadic(node, ctx):
    names = [n for n in node.inputs if n]
    if len(names) == 2 and node.op in ("Sum", "Max", "Min"):
        fast = native_binary(node, ctx, "Add" if node.op == "Sum" else node.op, names)
        if fast is not None:
            return fast
    ins = [v for v in operands(node, ctx) if v is not None]
    y = ctx.value(node.outputs[0])
    f = _VARIADIC[node.op]
    first, rest = ins[0], ins[1:]
    n = len(ins)
    mean = node.op == "Mean"

    def run():
        if rest:
            f(first, rest[0], out=y)
            for v in rest[1:]:
                f(y, v, out=y)
        else:
            np.copyto(y, first)
        if mean:
            np.divide(y, n, out=y, casting="unsafe")
    return quiet(run) if y.dtype.kind == "f" else run


@kernel("Where")
def where(node, ctx):
    cond = ctx.value(node.inputs[0])
    a, b = operands(node, ctx, node.inputs[1:])
    y = ctx.value(node.outputs[0])

    def run():
        # two broadcasting copies, no temporaries
        np.copyto(y, b)
        np.copyto(y, a, where=cond)
    return run


#: ops whose kernel here stays correct when the output buffer is input 0's buffer
#: (it reads all of x before writing y, or works element by element in one ufunc);
#: the arena planner may alias those. LeakyRelu, HardSwish, Softsign, Mish, tanh-Gelu,
#: Shrink and ThresholdedRelu read x after writing y, so they are not in it. SiLU (kernels/fused.py)
#: is: its native kernel works element by element, its numpy one reads all of x into a scratch
#: sigmoid before one ufunc writes y, and the int8 table lookup gathers into scratch when in place.
INPLACE_SAFE = frozenset(set(UNARY_UFUNCS) | set(BINARY_UFUNCS) | {
    "Identity", "Relu", "Sigmoid", "HardSigmoid", "PRelu", "Elu", "Selu", "Celu", "Softplus", "Erf",
    "Clip", "Div", "Mod", "Pow", "BitShift", "Sum", "Max", "Min", "Mean", "SiLU"})
# Gelu is safe only with approximate="none"; the arena decides per op name, so it is left out

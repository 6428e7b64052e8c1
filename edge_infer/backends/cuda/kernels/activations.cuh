/* Generated from edge_infer/ops/activations.py (python -m edge_infer.ops.activations --write): do not edit.
 * Activation / unary op codes, the same in the C, OpenCL and CUDA kernels. p0, p1 per code:
 * CLIP: 2 parameter(s), defaults -inf, inf
 * HARDSIGMOID: 2 parameter(s), defaults 0.2, 0.5
 * LEAKYRELU: 1 parameter(s), defaults 0.01
 * ELU: 1 parameter(s), defaults 1.0
 * SELU: 2 parameter(s), defaults 1.6732631921768188, 1.0507010221481323
 * CELU: 1 parameter(s), defaults 1.0
 */
#define ACT_NONE 0
#define ACT_RELU 1
#define ACT_CLIP 2
#define ACT_SIGMOID 3
#define ACT_TANH 4
#define ACT_HARDSIGMOID 5
#define ACT_LEAKYRELU 6
#define ACT_HARDSWISH 7
#define ACT_SILU 8
#define ACT_GELU 9
#define ACT_GELUTANH 10
#define ACT_ELU 11
#define ACT_SOFTPLUS 12
#define ACT_SOFTSIGN 13
#define ACT_MISH 14
#define ACT_EXP 15
#define ACT_LOG 16
#define ACT_ABS 17
#define ACT_NEG 18
#define ACT_SQRT 19
#define ACT_RECIPROCAL 20
#define ACT_FLOOR 21
#define ACT_CEIL 22
#define ACT_ERF 23
#define ACT_SELU 24
#define ACT_CELU 25
#define ACT_ROUND 26
#define ACT_COUNT 27

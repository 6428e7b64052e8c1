/* Generated from edge_infer/ops/activations.py (python -m edge_infer.ops.activations --write): do not edit.
 * Activation / unary op codes, the same in the C, OpenCL and CUDA kernels. p0, p1 per code:
 * CLIP: 2 parameter(s), defaults -inf, inf
 * HARDSIGMOID: 2 parameter(s), defaults 0.2, 0.5
 * LEAKYRELU: 1 parameter(s), defaults 0.01
 * ELU: 1 parameter(s), defaults 1.0
 * SELU: 2 parameter(s), defaults 1.6732631921768188, 1.0507010221481323
 * CELU: 1 parameter(s), defaults 1.0
 */
#ifndef EI_ACTIVATIONS_H
#define EI_ACTIVATIONS_H

#define EI_ACT_NONE 0
#define EI_ACT_RELU 1
#define EI_ACT_CLIP 2
#define EI_ACT_SIGMOID 3
#define EI_ACT_TANH 4
#define EI_ACT_HARDSIGMOID 5
#define EI_ACT_LEAKYRELU 6
#define EI_ACT_HARDSWISH 7
#define EI_ACT_SILU 8
#define EI_ACT_GELU 9
#define EI_ACT_GELUTANH 10
#define EI_ACT_ELU 11
#define EI_ACT_SOFTPLUS 12
#define EI_ACT_SOFTSIGN 13
#define EI_ACT_MISH 14
#define EI_ACT_EXP 15
#define EI_ACT_LOG 16
#define EI_ACT_ABS 17
#define EI_ACT_NEG 18
#define EI_ACT_SQRT 19
#define EI_ACT_RECIPROCAL 20
#define EI_ACT_FLOOR 21
#define EI_ACT_CEIL 22
#define EI_ACT_ERF 23
#define EI_ACT_SELU 24
#define EI_ACT_CELU 25
#define EI_ACT_ROUND 26
#define EI_ACT_COUNT 27

#endif

// Host C++ definitions of the CUDA built-ins the kernels use, so that the .cu sources also
// compile as ordinary C++ for the CPU emulator (emulator.py). Blocks run one at a time, so
// __shared__ becomes `static` (one copy = the running block's shared memory); the threads of
// a block that synchronizes run as real threads meeting at a barrier.
#pragma once
#include <math.h>
#include <stdint.h>
#include <algorithm>

struct EmuDim3 { unsigned x, y, z; };
typedef EmuDim3 dim3;
extern thread_local EmuDim3 threadIdx, blockIdx;
extern EmuDim3 blockDim, gridDim;
void __syncthreads();

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
#ifndef INFINITY
#define INFINITY (__builtin_inff())
#endif

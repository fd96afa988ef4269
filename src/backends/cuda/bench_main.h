// Entry point of the standalone decode benchmark (bench/kernels/decode_step_bench.cu), kept free
// of core/result.h so a .cu file can include it. Options: --dtype nvfp4,bf16 --batch 1,8
// --context 1024,32768 --steps 40.
#pragma once

namespace flint::cuda {

int decode_bench_main(int argc, char** argv);

}  // namespace flint::cuda

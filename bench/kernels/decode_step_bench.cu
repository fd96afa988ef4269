// Decode-step benchmark of the full Flint shape on dummy weights (the same code as
// `flint bench --load-format dummy`), for machines where the flint binary is not built.
#include "backends/cuda/bench_main.h"

int main(int argc, char** argv) { return flint::cuda::decode_bench_main(argc, argv); }

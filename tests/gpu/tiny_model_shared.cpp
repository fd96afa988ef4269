// The CPU tests' in-memory tiny Flint models (tests/unit/cpu/tiny_model.cpp), compiled into the
// GPU test binary too so both backends run the very same weights.
// TODO(cuda, #5): move tiny_model to tests/support so this include of a .cpp can go.
#include "tests/unit/cpu/tiny_model.cpp"  // NOLINT(bugprone-suspicious-include)

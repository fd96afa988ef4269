// Builds the CPU backend's in-memory tiny models into the engine tests as well.
#include "tests/unit/cpu/tiny_model.cpp"  // NOLINT: shared test helper, compiled once per binary

// Counts calls to the global operator new in this test binary, so a test can check that a
// steady-state packet loop allocates nothing.
#pragma once

#include <cstddef>

namespace uroce::test {

size_t allocations();

}  // namespace uroce::test

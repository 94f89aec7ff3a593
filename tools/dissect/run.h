// uroce-dissect as a function: read a capture, decode and track every frame, print it in the
// chosen mode. main.cc only parses the command line; tests call this directly.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace uroce::dissect {

enum class Mode : uint8_t { kLine, kExplain, kJson, kLadder, kLadderSvg };

/// Dissects the capture at `path`, writing the output to `out` (kLadder: the HTML page). Returns the exit status:
/// 0 when the whole capture was read, 1 when it could not be opened, is not an Ethernet
/// capture, or is truncated or corrupt; then one line naming the file and the problem goes to
/// `err` ("uroce-dissect: FILE: problem"), after the packets that could be read.
int dissect_file(const std::string& path, Mode mode, std::ostream& out, std::ostream& err);

}  // namespace uroce::dissect

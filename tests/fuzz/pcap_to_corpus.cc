// Writes every frame of the given pcaps as one file in a libFuzzer seed corpus directory.
// Usage: pcap_to_corpus OUT_DIR FILE.pcap...
#include <cstdio>
#include <fstream>
#include <string>

#include "pcap/pcap_file.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: pcap_to_corpus OUT_DIR FILE.pcap...\n");
    return 2;
  }
  size_t n = 0;
  for (int i = 2; i < argc; ++i) {
    uroce::drivers::PcapReader r(argv[i]);
    if (!r.ok()) {
      std::fprintf(stderr, "pcap_to_corpus: %s: %s\n", argv[i], r.error().c_str());
      return 1;
    }
    uroce::drivers::PcapRecord rec;
    while (r.next(rec)) {
      std::ofstream f(std::string(argv[1]) + "/seed-" + std::to_string(n++),
                      std::ios::binary);
      f.write(reinterpret_cast<const char*>(rec.data.data()),
              static_cast<std::streamsize>(rec.data.size()));
    }
  }
  std::printf("%zu seeds\n", n);
  return 0;
}

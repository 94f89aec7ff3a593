# Writes a compiled BPF program (IN) into a C++ source (OUT) as a byte array named NAME (and
# NAME + "Size"), so that the library carries it and needs no file installed beside it.
# cmake -DIN=... -DOUT=... -DNAME=kSteerProgram -P embed.cmake
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n" body "${body}")
get_filename_component(src ${IN} NAME_WE)
file(WRITE ${OUT} "// Generated from ${src}.bpf.c by embed.cmake: do not edit.\n"
  "#include <cstddef>\n"
  "namespace uroce::drivers {\n"
  "extern const unsigned char ${NAME}[] = {\n${body}\n};\n"
  "extern const size_t ${NAME}Size = ${bytes};\n"
  "}  // namespace uroce::drivers\n")

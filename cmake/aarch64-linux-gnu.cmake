# Cross-compiling for 64-bit ARM Linux on a Debian x86 machine (`make arm64`): Debian's
# g++-aarch64-linux-gnu, with the libraries from the arm64 multiarch -dev packages
# (/usr/lib/aarch64-linux-gnu) and host tools (python3, pkg-config) from the build machine.
# Programs run at build time (GoogleTest's test discovery) run under qemu-aarch64.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# The loader of the multiarch libc6:arm64 when present (it must match libc.so.6: see
# tools/arm64_run.sh), else the cross toolchain's.
if(EXISTS /lib/ld-linux-aarch64.so.1)
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64)
else()
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
endif()
# pkg-config reads only the arm64 .pc files (and the architecture-independent ones).
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)

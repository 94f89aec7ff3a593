# The Debian package: `cpack -G DEB` in a build tree (the test install.deb makes one, unpacks
# it into a fresh directory and runs ibv_rc_pingpong through its `uroce run`).
# It holds what `cmake --install` installs, under /usr: the commands, their man pages, uroce's
# libibverbs.so.1 in /usr/lib/uroce (private: it does not replace libibverbs1) and the sample
# uroce.conf. Depends is computed by dpkg-shlibdeps from the binaries (libpcap, ISA-L, libnuma
# and libbsd for the statically linked DPDK, the C++ runtime).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME uroce)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(UROCE_PACKAGE_CONTACT "uroce developers <uroce@localhost>" CACHE STRING
    "The Maintainer field of the Debian package")
set(CPACK_PACKAGE_CONTACT ${UROCE_PACKAGE_CONTACT})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "RoCEv2 in user space for unmodified verbs programs")
set(CPACK_PACKAGE_DESCRIPTION "uroce is a RoCEv2 protocol stack that runs in user space over a
plain Ethernet interface. `uroce run` starts unmodified verbs programs (ibv_rc_pingpong,
perftest, pyverbs) on uroce's own libibverbs.so.1, installed in a private directory so that
no other program uses it. uroce-dissect explains RoCEv2 captures; uroce-replay checks uroce
against recorded conversations.")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# ibverbs-utils: ibv_devinfo for `uroce devinfo`, and the pingpongs; perftest and iproute2
# (network namespaces) for trying uroce out.
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "ibverbs-utils")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "perftest, iproute2")
include(CPack)

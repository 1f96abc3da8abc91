# Debian packages from CPack (`cmake --build build --target package` writes them to build/),
# one per install component (TrainscopeInstall.cmake):
#   trainscope-sidecar  the sidecar, trainscopectl, the systemd unit, dashboards and rules
#   libtrainscope-dev   the runtime library, its headers and its CMake package
# They install under CMAKE_INSTALL_PREFIX, which the programs also use to find their files:
# build packages with -DCMAKE_INSTALL_PREFIX=/usr (scripts/test does).
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME trainscope)
set(CPACK_PACKAGE_VENDOR "trainscope")
set(CPACK_PACKAGE_CONTACT "trainscope developers <trainscope@example.org>")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL sidecar dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://example.org/trainscope")
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_SIDECAR_PACKAGE_NAME trainscope-sidecar)
set(CPACK_DEBIAN_SIDECAR_PACKAGE_SECTION net)
set(CPACK_DEBIAN_SIDECAR_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_SIDECAR_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/packaging/debian/sidecar/conffiles
  ${PROJECT_SOURCE_DIR}/packaging/debian/sidecar/postinst
  ${PROJECT_SOURCE_DIR}/packaging/debian/sidecar/prerm
  ${PROJECT_SOURCE_DIR}/packaging/debian/sidecar/postrm)
set(CPACK_DEBIAN_SIDECAR_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_COMPONENT_SIDECAR_DESCRIPTION
  "watches the parameter-server training tasks of a node
trainscope-sidecar runs on every node of a training cluster. It polls the
heartbeats of the node's tasks, says within a second which task is dead,
hung, blocked in CreateSession or slow, and why, shares that view with the
other nodes' sidecars, and exports it on a status page, an HTTP API and
/metrics. trainscopectl asks it from the command line. The Grafana
dashboards and Prometheus alert rules are in /usr/share/trainscope.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libtrainscope-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# Static libraries: what a training program needs to build and link against them.
# protobuf-compiler-grpc: gRPC's CMake package names its plugins, which Debian's libgrpc++-dev
# does not bring (fresh_root_test.sh found it).
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libgrpc++-dev, protobuf-compiler-grpc, libprotobuf-dev, libabsl-dev, prometheus-cpp-dev, libssl-dev, libspdlog-dev, nlohmann-json3-dev, libeigen3-dev, libcli11-dev")
set(CPACK_DEBIAN_DEV_PACKAGE_RECOMMENDS "trainscope-sidecar (= ${PROJECT_VERSION}-1)")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "parameter-server training runtime with diagnosis built in (development files)
The trainscope runtime is a library for parameter-server training programs
over gRPC, in the TensorFlow style: one program on every machine, TF_CONFIG
gives each its role. It emits metrics, traces and heartbeats, and turns each
classic failure into an error that names the task, the peer and the cause.
This package holds the static libraries, the headers and the CMake package:
find_package(trainscope) and link trainscope::runtime.")

include(CPack)

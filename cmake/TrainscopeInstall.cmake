# What `cmake --install` puts where, in two components (one Debian package each, see
# TrainscopePackaging.cmake):
#   dev      the runtime library and what it links (static), its public headers, and the CMake
#            package trainscopeConfig.cmake: find_package(trainscope) gives trainscope::runtime
#            and trainscope::common
#   sidecar  trainscope-sidecar and trainscopectl, the
#            systemd unit with its flags in /etc/default/trainscope-sidecar, and the dashboards
#            and alert rules under share/trainscope
include(CMakePackageConfigHelpers)

# The runtime is static: every library it links privately is installed and exported with it.
set(trainscope_exported
  trainscope_runtime trainscope_common trainscope_proto trainscope_common_grpc
  trainscope_common_tls_material trainscope_common_http_tls trainscope_telemetry
  trainscope_telemetry_grpc trainscope_telemetry_otlp)
foreach(target ${trainscope_exported})
  string(REGEX REPLACE "^trainscope_" "" export_name ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
endforeach()
install(TARGETS ${trainscope_exported} EXPORT trainscopeTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# `cmake --install --strip` (and the packages) strip the archives' debug information too, which
# CMake does only for programs and shared libraries: 118 MB with it, about 15 without.
foreach(target ${trainscope_exported})
  install(CODE "if(CMAKE_INSTALL_DO_STRIP)
    execute_process(COMMAND ${CMAKE_STRIP} --strip-debug --enable-deterministic-archives
      \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:${target}>\")
  endif()" COMPONENT dev)
endforeach()
install(DIRECTORY runtime/include/trainscope common/include/trainscope
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev FILES_MATCHING PATTERN "*.h"
  PATTERN "http_client.h" EXCLUDE)  # The sidecar's and trainscopectl's, not the runtime's.
install(FILES ${PROJECT_BINARY_DIR}/runtime/include/trainscope/runtime/version.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/trainscope/runtime COMPONENT dev)

set(trainscope_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/trainscope)
install(EXPORT trainscopeTargets NAMESPACE trainscope:: DESTINATION ${trainscope_cmake_dir}
  COMPONENT dev)
configure_package_config_file(cmake/trainscopeConfig.cmake.in
  ${PROJECT_BINARY_DIR}/trainscopeConfig.cmake INSTALL_DESTINATION ${trainscope_cmake_dir})
# 0.x: a minor version may break the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/trainscopeConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/trainscopeConfig.cmake
  ${PROJECT_BINARY_DIR}/trainscopeConfigVersion.cmake
  DESTINATION ${trainscope_cmake_dir} COMPONENT dev)

install(TARGETS trainscope-sidecar trainscopectl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  COMPONENT sidecar)
install(FILES packaging/debian/trainscope-sidecar.service
  DESTINATION /lib/systemd/system COMPONENT sidecar)
install(FILES packaging/debian/trainscope-sidecar.default
  DESTINATION /etc/default RENAME trainscope-sidecar
  COMPONENT sidecar)
install(DIRECTORY dashboards/grafana dashboards/prometheus dashboards/alertmanager
  DESTINATION ${CMAKE_INSTALL_DATADIR}/trainscope COMPONENT sidecar
  PATTERN "pending_metrics.txt" EXCLUDE PATTERN "tests" EXCLUDE)

# Debian's documentation of each package: copyright, changelog.Debian.gz, and for the sidecar a
# README and man pages (help2man, from --help and --version, where it is installed).
set(trainscope_deb_doc ${PROJECT_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${trainscope_deb_doc})
execute_process(COMMAND gzip -9n -c ${PROJECT_SOURCE_DIR}/packaging/debian/changelog
  OUTPUT_FILE ${trainscope_deb_doc}/changelog.Debian.gz)
foreach(component_package sidecar:trainscope-sidecar dev:libtrainscope-dev)
  string(REPLACE ":" ";" pair ${component_package})
  list(GET pair 0 component)
  list(GET pair 1 package)
  install(FILES packaging/debian/copyright ${trainscope_deb_doc}/changelog.Debian.gz
    DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${package} COMPONENT ${component})
endforeach()
# Lintian's findings that stay, each explained in the override file.
install(FILES packaging/debian/lintian-overrides DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
  RENAME trainscope-sidecar COMPONENT sidecar)
install(FILES packaging/debian/lintian-overrides DESTINATION ${CMAKE_INSTALL_DATADIR}/lintian/overrides
  RENAME libtrainscope-dev COMPONENT dev)
install(FILES packaging/debian/README DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/trainscope-sidecar
  COMPONENT sidecar)
find_program(HELP2MAN help2man)
if(HELP2MAN)
  set(trainscope-sidecar_whatis "watch the training tasks of this node")
  set(trainscopectl_whatis "ask a trainscope sidecar about the cluster")
  foreach(program trainscope-sidecar trainscopectl)
    add_custom_command(OUTPUT ${trainscope_deb_doc}/${program}.1.gz
      COMMAND ${HELP2MAN} --no-info --no-discard-stderr --version-string=${PROJECT_VERSION}
              "--name=${${program}_whatis}"
              -o ${trainscope_deb_doc}/${program}.1 $<TARGET_FILE:${program}>
      COMMAND gzip -9nf ${trainscope_deb_doc}/${program}.1
      DEPENDS ${program} COMMENT "man page of ${program}")
    list(APPEND trainscope_man_pages ${trainscope_deb_doc}/${program}.1.gz)
  endforeach()
  add_custom_target(trainscope_man_pages ALL DEPENDS ${trainscope_man_pages})
  install(FILES ${trainscope_man_pages} DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
    COMPONENT sidecar)
endif()

# SPDX-License-Identifier: MIT
# Install rules (GNUInstallDirs) and the Debian package (CPack DEB).
#
#   cmake --install build [--prefix DIR]     binaries, shim, page, docs, man,
#                                            completion, unit, settings
#   (cd build && cpack -G DEB)               accel_<version>_<arch>.deb
#
# Layout: acceld in sbin, accelctl in bin, the shim in <libdir>/accel/, the
# page in share/accel/web; acceld finds the last two relative to itself
# (src/daemon/paths.c). The unit and the settings file (a conffile) are
# made at install time, for the prefix of that install (below).
# docs/install.md describes the package; packaging/README.md its files.

set(ACCEL_PKG_DIR ${CMAKE_SOURCE_DIR}/packaging)

install(TARGETS acceld RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR})
if(TARGET accelctl)
    install(TARGETS accelctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(TARGETS accel-runc RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS accel-ctxprobe RUNTIME
    DESTINATION ${CMAKE_INSTALL_LIBEXECDIR}/accel)
if(TARGET accelshim)
    install(TARGETS accelshim LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/accel)
endif()
install(DIRECTORY ${CMAKE_SOURCE_DIR}/web/dist/
    DESTINATION ${CMAKE_INSTALL_DATADIR}/accel/web)
install(FILES ${CMAKE_SOURCE_DIR}/examples/homelab.yaml
    ${CMAKE_SOURCE_DIR}/examples/comfyui.yaml ${CMAKE_SOURCE_DIR}/examples/nogpu.yaml
    DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples)
file(GLOB ACCEL_EXAMPLE_APPS ${CMAKE_SOURCE_DIR}/examples/apps/*.yaml)
if(ACCEL_EXAMPLE_APPS)
    install(FILES ${ACCEL_EXAMPLE_APPS}
        DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples/apps)
endif()
install(FILES ${CMAKE_SOURCE_DIR}/docs/api.md ${CMAKE_SOURCE_DIR}/docs/cli.md
    ${CMAKE_SOURCE_DIR}/docs/install.md ${CMAKE_SOURCE_DIR}/docs/shim.md
    ${CMAKE_SOURCE_DIR}/docs/web.md ${CMAKE_SOURCE_DIR}/docs/observability.md
    ${CMAKE_SOURCE_DIR}/README.md
    DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${ACCEL_PKG_DIR}/bash-completion/accelctl
    DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)

# Debian wants copyright and a compressed changelog in the doc directory;
# gzip -n keeps the package reproducible (no name or time stamp inside).
find_program(ACCEL_GZIP gzip REQUIRED)
set(ACCEL_CHANGELOG_GZ ${CMAKE_BINARY_DIR}/packaging/changelog.gz)
add_custom_command(OUTPUT ${ACCEL_CHANGELOG_GZ}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/packaging
    COMMAND ${ACCEL_GZIP} -9n -c ${ACCEL_PKG_DIR}/changelog > ${ACCEL_CHANGELOG_GZ}
    DEPENDS ${ACCEL_PKG_DIR}/changelog VERBATIM)
add_custom_target(accel_changelog ALL DEPENDS ${ACCEL_CHANGELOG_GZ})
install(FILES ${ACCEL_CHANGELOG_GZ} ${ACCEL_PKG_DIR}/copyright
    DESTINATION ${CMAKE_INSTALL_DOCDIR})

# Man pages: docs/man/*.scd through scdoc at build time (<build>/man), with
# their @DATADIR@-style place holders; packaging/install-paths.cmake fills
# those in for the prefix of the install and gzips them (Debian policy
# 12.1). Without scdoc the pages are not built and a message says so.
find_program(ACCEL_SCDOC scdoc)
set(ACCEL_MAN_OUT "")
if(ACCEL_SCDOC)
    foreach(page accelctl.1 acceld.8 accel-runc.1)
        set(out ${CMAKE_BINARY_DIR}/man/${page})
        add_custom_command(OUTPUT ${out}
            COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/man
            COMMAND sh -c "${ACCEL_SCDOC} < '${CMAKE_SOURCE_DIR}/docs/man/${page}.scd' > '${out}'"
            DEPENDS ${CMAKE_SOURCE_DIR}/docs/man/${page}.scd VERBATIM)
        list(APPEND ACCEL_MAN_OUT ${out})
    endforeach()
    add_custom_target(accel_man ALL DEPENDS ${ACCEL_MAN_OUT})
else()
    message(STATUS "scdoc not found: man pages are not built "
        "(apt-get install scdoc)")
endif()

# The files that name installed paths (the unit, the settings file's place,
# the man pages, lintian's overrides) are made when installing, for the
# prefix of that install: `cmake --install build --prefix DIR` gives a unit
# whose ExecStart is DIR/sbin/acceld, whatever the configured prefix was
# (packaging/install-paths.cmake). The unit goes to /lib/systemd/system for
# the prefix /usr (Debian 12's place), else <prefix>/lib/systemd/system;
# the settings to /etc/default/accel for /usr, else
# <prefix>/<sysconfdir>/default/accel: an install never writes outside its
# prefix but for the package's own places.
#
# A build directory configured before this kept the default of its
# configure-time prefix in the cache: back to the install-time default.
get_property(ACCEL_UNITDIR_HELP CACHE ACCEL_SYSTEMD_UNITDIR
    PROPERTY HELPSTRING)
if(ACCEL_UNITDIR_HELP MATCHES "^where acceld.service is installed \\("
   AND ACCEL_SYSTEMD_UNITDIR MATCHES "^/?lib/systemd/system$")
    unset(ACCEL_SYSTEMD_UNITDIR CACHE)
endif()
set(ACCEL_SYSTEMD_UNITDIR "" CACHE STRING
    "where acceld.service goes (relative: under the prefix; empty: default)")
set(ACCEL_INSTALL_VARS "")
foreach(d SBINDIR BINDIR LIBDIR DATADIR DOCDIR MANDIR SYSCONFDIR)
    string(APPEND ACCEL_INSTALL_VARS
        "set(ACCEL_DIR_${d} \"${CMAKE_INSTALL_${d}}\")\n")
endforeach()
install(CODE "${ACCEL_INSTALL_VARS}
set(ACCEL_PKG_DIR \"${ACCEL_PKG_DIR}\")
set(ACCEL_WORK_DIR \"${CMAKE_BINARY_DIR}/packaging\")
set(ACCEL_GZIP \"${ACCEL_GZIP}\")
set(ACCEL_MAN_PAGES \"${ACCEL_MAN_OUT}\")
set(ACCEL_SYSTEMD_UNITDIR \"${ACCEL_SYSTEMD_UNITDIR}\")
include(\"${ACCEL_PKG_DIR}/install-paths.cmake\")")

# ---- the Debian package ----
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME accel)
set(CPACK_PACKAGE_VENDOR "accel")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "GPU sharing daemon for home labs")
set(CPACK_PACKAGE_CONTACT "accel maintainers <accel@users.noreply.github.com>")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_ACCEL_CONFIGURED_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_PROJECT_CONFIG_FILE ${ACCEL_PKG_DIR}/cpack-config.cmake)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS OFF)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/accel/accel")
# the synopsis line is CPACK_PACKAGE_DESCRIPTION_SUMMARY; this is the rest
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
"acceld lends the GPUs of one or more machines to applications: each app
declares the GPU memory it needs, acceld admits it onto a device, binds it
and starts it as its owner's own uid with a preload library that keeps it
to its share. accelctl and a web page manage apps, bindings and users.")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${ACCEL_PKG_DIR}/debian/conffiles
    ${ACCEL_PKG_DIR}/debian/postinst
    ${ACCEL_PKG_DIR}/debian/prerm
    ${ACCEL_PKG_DIR}/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
include(CPack)

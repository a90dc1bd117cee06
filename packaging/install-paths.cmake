# SPDX-License-Identifier: MIT
# Run by `cmake --install` (install(CODE) in packaging/install.cmake), not
# at configure time: it installs the files that name installed paths, made
# for the prefix of this install, which `cmake --install --prefix` sets:
#
#   acceld.service           ExecStart=<sbindir>/acceld, EnvironmentFile=
#                            the settings file below
#   <settings>               /etc/default/accel for the prefix /usr, else
#                            <prefix>/<sysconfdir>/default/accel
#   acceld.8, accelctl.1     the page, shim, examples and settings paths
#   lintian overrides        the package's paths
#
# Set by the caller: ACCEL_PKG_DIR, ACCEL_WORK_DIR (a build directory for
# the files on their way), ACCEL_GZIP, ACCEL_MAN_PAGES (built pages with
# @...@ place holders, may be empty), ACCEL_SYSTEMD_UNITDIR (empty: the
# default below), and the GNUInstallDirs directories ACCEL_DIR_<NAME> as
# configured (relative: under the prefix). DESTDIR applies as to every
# other file (file(INSTALL) prepends it), and each file goes to the
# install manifest.

set(accel_prefix "${CMAKE_INSTALL_PREFIX}")
if(NOT accel_prefix STREQUAL "/")
    string(REGEX REPLACE "/+$" "" accel_prefix "${accel_prefix}")
endif()

# A configured directory as an absolute path under this install's prefix.
function(accel_full_dir out dir)
    if(IS_ABSOLUTE "${dir}")
        set(${out} "${dir}" PARENT_SCOPE)
    elseif(accel_prefix STREQUAL "/")
        set(${out} "/${dir}" PARENT_SCOPE)
    else()
        set(${out} "${accel_prefix}/${dir}" PARENT_SCOPE)
    endif()
endfunction()

foreach(accel_d SBINDIR BINDIR LIBDIR DATADIR DOCDIR MANDIR SYSCONFDIR)
    accel_full_dir(ACCEL_FULL_${accel_d} "${ACCEL_DIR_${accel_d}}")
endforeach()
# GNUInstallDirs' rule for /usr (and /): settings live in /etc
if((accel_prefix STREQUAL "/usr" OR accel_prefix STREQUAL "/") AND
   NOT IS_ABSOLUTE "${ACCEL_DIR_SYSCONFDIR}")
    set(ACCEL_FULL_SYSCONFDIR /etc)
endif()
set(ACCEL_SETTINGS_FILE "${ACCEL_FULL_SYSCONFDIR}/default/accel")
# Debian 12's place for the prefix /usr (usr-merged, so also
# /usr/lib/systemd/system); for any other prefix under the prefix itself
if(NOT ACCEL_SYSTEMD_UNITDIR STREQUAL "")
    accel_full_dir(ACCEL_UNITDIR "${ACCEL_SYSTEMD_UNITDIR}")
elseif(accel_prefix STREQUAL "/usr")
    set(ACCEL_UNITDIR /lib/systemd/system)
else()
    accel_full_dir(ACCEL_UNITDIR lib/systemd/system)
endif()
# lintian names a package's files without the leading slash
foreach(accel_d SBINDIR BINDIR LIBDIR DATADIR)
    string(REGEX REPLACE "^/+" "" ACCEL_PKG_${accel_d}
        "${ACCEL_FULL_${accel_d}}")
endforeach()
string(REGEX REPLACE "^/+" "" ACCEL_PKG_UNITDIR "${ACCEL_UNITDIR}")

# The files on their way: a directory of this install's own (two installs
# with different destinations may run at once), removed at the end.
string(SHA1 accel_key "$ENV{DESTDIR}|${accel_prefix}")
set(accel_stage "${ACCEL_WORK_DIR}/install-${accel_key}")
file(REMOVE_RECURSE "${accel_stage}")
file(MAKE_DIRECTORY "${accel_stage}")

set(accel_mode644 OWNER_READ OWNER_WRITE GROUP_READ WORLD_READ)

configure_file("${ACCEL_PKG_DIR}/acceld.service.in"
    "${accel_stage}/acceld.service" @ONLY)
file(INSTALL DESTINATION "${ACCEL_UNITDIR}" TYPE FILE
    PERMISSIONS ${accel_mode644} FILES "${accel_stage}/acceld.service")
file(INSTALL DESTINATION "${ACCEL_FULL_SYSCONFDIR}/default" TYPE FILE
    PERMISSIONS ${accel_mode644} FILES "${ACCEL_PKG_DIR}/default/accel")
configure_file("${ACCEL_PKG_DIR}/debian/lintian-overrides"
    "${accel_stage}/lintian/accel" @ONLY)
file(INSTALL DESTINATION "${ACCEL_FULL_DATADIR}/lintian/overrides" TYPE FILE
    PERMISSIONS ${accel_mode644} FILES "${accel_stage}/lintian/accel")

# Man pages: the place holders replaced, then gzip -n (no name or time
# stamp: the package stays reproducible).
foreach(accel_page ${ACCEL_MAN_PAGES})
    get_filename_component(accel_name "${accel_page}" NAME)
    string(REGEX REPLACE "^.*\\.([0-9])$" "\\1" accel_sect "${accel_name}")
    file(READ "${accel_page}" accel_text)
    foreach(accel_d DATADIR DOCDIR LIBDIR)
        string(REPLACE "@${accel_d}@" "${ACCEL_FULL_${accel_d}}" accel_text
            "${accel_text}")
    endforeach()
    string(REPLACE "@SETTINGS@" "${ACCEL_SETTINGS_FILE}" accel_text
        "${accel_text}")
    set(accel_man "${accel_stage}/man/${accel_name}")
    file(WRITE "${accel_man}" "${accel_text}")
    execute_process(COMMAND "${ACCEL_GZIP}" -9n -c "${accel_man}"
        OUTPUT_FILE "${accel_man}.gz" RESULT_VARIABLE accel_rc)
    if(NOT accel_rc EQUAL 0)
        message(FATAL_ERROR "accel: gzip of ${accel_name}: ${accel_rc}")
    endif()
    file(INSTALL DESTINATION "${ACCEL_FULL_MANDIR}/man${accel_sect}" TYPE FILE
        PERMISSIONS ${accel_mode644} FILES "${accel_man}.gz")
endforeach()

file(REMOVE_RECURSE "${accel_stage}")

# SPDX-License-Identifier: MIT
# Read by cpack (CPACK_PROJECT_CONFIG_FILE): a Debian package needs a build
# configured with -DCMAKE_INSTALL_PREFIX=/usr, because the multiarch
# library directory (lib/<triplet>) and acceld's relative lookups
# (src/daemon/paths.c) follow from the prefix at configure time. (The unit,
# the settings file and the man pages follow the prefix of the install.)
if(CPACK_GENERATOR STREQUAL "DEB" AND NOT CPACK_ACCEL_CONFIGURED_PREFIX STREQUAL "/usr")
    message(FATAL_ERROR "accel: the .deb needs a build configured with "
        "-DCMAKE_INSTALL_PREFIX=/usr (this one has ${CPACK_ACCEL_CONFIGURED_PREFIX}); "
        "see docs/install.md")
endif()

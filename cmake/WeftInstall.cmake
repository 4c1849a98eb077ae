# `cmake --install` puts the public headers, the libraries and a CMake package in the prefix:
# find_package(weft) gives weft::weft (and weft::core). The `weft` tool installs too (tools/).
include(CMakePackageConfigHelpers)
set(_weft_targets weft_core)
if(WEFT_HAVE_CUDA)
  list(APPEND _weft_targets weft weft_nccl)
  set_target_properties(weft_nccl PROPERTIES EXPORT_NAME nccl)
endif()
install(TARGETS ${_weft_targets} EXPORT weftTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/weft DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT weftTargets NAMESPACE weft:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/weftConfig.cmake.in ${PROJECT_BINARY_DIR}/weftConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/weftConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/weftConfig.cmake ${PROJECT_BINARY_DIR}/weftConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/weft)

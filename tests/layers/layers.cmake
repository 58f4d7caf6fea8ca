# The layers of src/ (src/CMakeLists.txt, docs/ARCHITECTURE.md) stay one way:
#  - at link time: each layer's library is linked whole into an executable of
#    its own (layer_link_NAME) with nothing but the layers it declares, so a
#    call from a layer into one above it is an undefined symbol and the build
#    fails;
#  - at include time: scripts/check-layers (the `layers` test) fails an
#    #include of a folder that is not below the including file's folder, and a
#    folder of src/ that is not a layer.
get_property(kvreplay_layers GLOBAL PROPERTY KVREPLAY_LAYERS)
foreach(layer IN LISTS kvreplay_layers)
  add_executable(layer_link_${layer} ${CMAKE_CURRENT_LIST_DIR}/link_check.cc)
  target_link_libraries(layer_link_${layer} PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,kvreplay_${layer}>")
endforeach()

get_property(kvreplay_layer_manifest GLOBAL PROPERTY KVREPLAY_LAYER_MANIFEST)
file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/layers.txt "${kvreplay_layer_manifest}")
add_test(NAME layers
         COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/check-layers ${PROJECT_SOURCE_DIR}/src
                 ${CMAKE_CURRENT_BINARY_DIR}/layers.txt)
# The seam check of scripts/check-layers fails a planted violation.
add_test(NAME layers_seams
         COMMAND bash ${CMAKE_CURRENT_LIST_DIR}/seam_check_test.sh
                 ${PROJECT_SOURCE_DIR}/scripts/check-layers ${PROJECT_SOURCE_DIR}/src
                 ${CMAKE_CURRENT_BINARY_DIR}/layers.txt)

# trainscope_proto_library(<target> ROOT <dir> PROTOS <file>...): a static library of the C++
# messages and gRPC services generated from .proto files under ROOT, generated into the build
# folder.
function(trainscope_proto_library target)
  cmake_parse_arguments(ARG "" "ROOT" "PROTOS" ${ARGN})
  set(gen_dir ${CMAKE_CURRENT_BINARY_DIR}/gen)
  file(MAKE_DIRECTORY ${gen_dir})
  get_target_property(grpc_cpp_plugin gRPC::grpc_cpp_plugin LOCATION)
  set(gen_srcs)
  foreach(proto ${ARG_PROTOS})
    get_filename_component(abs ${proto} ABSOLUTE BASE_DIR ${ARG_ROOT})
    file(RELATIVE_PATH rel ${ARG_ROOT} ${abs})
    string(REGEX REPLACE "\\.proto$" "" stem ${rel})
    set(outs ${gen_dir}/${stem}.pb.cc ${gen_dir}/${stem}.pb.h
             ${gen_dir}/${stem}.grpc.pb.cc ${gen_dir}/${stem}.grpc.pb.h)
    add_custom_command(
      OUTPUT ${outs}
      COMMAND protobuf::protoc --proto_path=${ARG_ROOT} --cpp_out=${gen_dir}
              --grpc_out=${gen_dir} --plugin=protoc-gen-grpc=${grpc_cpp_plugin} ${abs}
      DEPENDS ${abs}
      COMMENT "protoc ${rel}")
    list(APPEND gen_srcs ${gen_dir}/${stem}.pb.cc ${gen_dir}/${stem}.grpc.pb.cc)
  endforeach()
  add_library(${target} STATIC ${gen_srcs})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${gen_dir}>)
  target_link_libraries(${target} PUBLIC protobuf::libprotobuf gRPC::grpc++)
  # protoc's files each define the same file-local names (schemas, file_default_instances): one
  # translation unit each, also in a unity build.
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON UNITY_BUILD OFF)
endfunction()

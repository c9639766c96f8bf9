# emu_source.cmake - a kernel source as emu.h can compile it: the one
# construct of the CUDA dialect with no C++ spelling under emu.h's macros,
# a dynamic shared-memory array (`extern __shared__ [__align__(n)] unsigned
# char name[];`), becomes a pointer to the CTA's buffer (SCREE_SMEM_BASE);
# nothing else changes. cmake -DIN=kernel.cu -DOUT=copy.cu -P emu_source.cmake
file(READ "${IN}" text)
string(REGEX REPLACE
  "extern __shared__ (__align__\\([0-9]+\\) )?unsigned char ([A-Za-z_][A-Za-z_0-9]*)\\[\\];"
  "unsigned char *const \\2 = SCREE_SMEM_BASE;" text "${text}")
string(FIND "${text}" "extern __shared__" left)
if(NOT left EQUAL -1)
  message(FATAL_ERROR "${IN}: an extern __shared__ declaration emu_source.cmake cannot rewrite")
endif()
file(WRITE "${OUT}.tmp" "#line 1 \"${IN}\"\n${text}")
execute_process(COMMAND "${CMAKE_COMMAND}" -E copy_if_different "${OUT}.tmp" "${OUT}")
file(REMOVE "${OUT}.tmp")

# gpt-oss's published tokenizer files (tokenizer.json is 27 MB), rebuilt from
# tiktoken's o200k ranks by tools/gen_gptoss_tokenizer.py and committed as a
# 2.9 MB .tar.xz. Unpacked at configure time into <build>/gptoss-tokenizer/,
# where the tokenizer tests and a tiny gpt-oss checkpoint find them (next to
# the nibble binary), and again whenever the archive changes.
set(NIBBLE_GPTOSS_TOKENIZER_ARCHIVE ${CMAKE_SOURCE_DIR}/tests/fixtures/tokenizer/gptoss_tokenizer.tar.xz)
set(NIBBLE_GPTOSS_TOKENIZER_DIR ${CMAKE_BINARY_DIR}/gptoss-tokenizer)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${NIBBLE_GPTOSS_TOKENIZER_ARCHIVE})
file(SHA256 ${NIBBLE_GPTOSS_TOKENIZER_ARCHIVE} nibble_gptoss_tokenizer_sha)
set(nibble_gptoss_stamp ${NIBBLE_GPTOSS_TOKENIZER_DIR}/.archive-sha256)
set(nibble_gptoss_have "")
if(EXISTS ${nibble_gptoss_stamp})
  file(READ ${nibble_gptoss_stamp} nibble_gptoss_have)
endif()
if(NOT nibble_gptoss_have STREQUAL nibble_gptoss_tokenizer_sha)
  file(REMOVE_RECURSE ${NIBBLE_GPTOSS_TOKENIZER_DIR})
  file(ARCHIVE_EXTRACT INPUT ${NIBBLE_GPTOSS_TOKENIZER_ARCHIVE} DESTINATION ${NIBBLE_GPTOSS_TOKENIZER_DIR})
  file(WRITE ${nibble_gptoss_stamp} ${nibble_gptoss_tokenizer_sha})
endif()

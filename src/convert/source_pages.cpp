#include "convert/source_pages.h"

#include <sys/mman.h>
#include <unistd.h>

namespace nibble {

namespace {

uintptr_t page_size() {
  static const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  return page;
}

}  // namespace

void prefetch_pages(const uint8_t* p, size_t n) {
  if (n == 0) return;
  const uintptr_t begin = uintptr_t(p) & ~(page_size() - 1);
  posix_madvise(reinterpret_cast<void*>(begin), uintptr_t(p) + n - begin, POSIX_MADV_WILLNEED);
}

void populate_pages(const uint8_t* p, size_t n) {
#ifdef MADV_POPULATE_READ
  if (n == 0) return;
  const uintptr_t begin = uintptr_t(p) & ~(page_size() - 1);
  ::madvise(reinterpret_cast<void*>(begin), uintptr_t(p) + n - begin, MADV_POPULATE_READ);
#else
  (void)p;
  (void)n;
#endif
}

void release_pages(const uint8_t* p, size_t n) {
  const uintptr_t page = page_size();
  const uintptr_t begin = (uintptr_t(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (uintptr_t(p) + n) & ~(page - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace nibble

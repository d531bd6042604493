// What the converter does with the pages of the memory-mapped source
// checkpoint as it streams through it: read them ahead, map them ahead of
// the thread that will read them, and drop them from the process once
// consumed, so that the resident size stays bounded whatever the model's
// size. All three are hints: a failure only loses the effect (the data is
// always read through the mapping, which faults pages in as needed).
#pragma once

#include <cstddef>
#include <cstdint>

namespace nibble {

// Starts asynchronous read-ahead of a range (MADV_WILLNEED): matters when the
// model is not in the page cache, which for a 150 GB checkpoint is the
// normal case.
void prefetch_pages(const uint8_t* p, size_t n);

// Maps a range into the process now (MADV_POPULATE_READ, Linux 5.14+),
// reading it from disk first if it is not cached: called by the producer so
// that the writer, which reads the range next, takes no page faults.
void populate_pages(const uint8_t* p, size_t n);

// Drops the mappings of a consumed range (MADV_DONTNEED on the read-only
// map; the data stays in the page cache). Only pages entirely inside the
// range are dropped, so a neighbour's bytes are never unmapped.
void release_pages(const uint8_t* p, size_t n);

}  // namespace nibble

// Human-readable numbers for the text reports.
#pragma once

#include <cstdint>
#include <string>

namespace nibble::cli {

std::string human_bytes(double bytes);   // "3.45 GB" (decimal units, like bandwidth)
std::string human_count(double n);       // "284.3B", "13.2M"

}  // namespace nibble::cli

// The GGUF format's codebooks as defined by ggml (ggml-common.h, MIT license), value for value.
// Each grid entry packs the magnitudes of 8 (uint64) or 4 (uint32) consecutive weights, one byte
// each, lowest byte first; kIq1sGrid's bytes are int8 -1 / 0 / +1.
#pragma once

#include <cstdint>

namespace gemmaserve::cpu::ggml_codebook {

extern const uint64_t kIq2xxsGrid[256];
extern const uint64_t kIq2xsGrid[512];
extern const uint64_t kIq2sGrid[1024];
extern const uint32_t kIq3xxsGrid[256];
extern const uint32_t kIq3sGrid[512];
extern const uint64_t kIq1sGrid[2048];

// Sign bytes of the IQ2 / IQ3 types: 7 stored bits, the 8th makes the count of set bits even.
inline constexpr uint8_t kSigns[128] = {
    0,   129, 130, 3,   132, 5,   6,   135, 136, 9,   10,  139, 12,  141, 142, 15,  144, 17,  18,
    147, 20,  149, 150, 23,  24,  153, 154, 27,  156, 29,  30,  159, 160, 33,  34,  163, 36,  165,
    166, 39,  40,  169, 170, 43,  172, 45,  46,  175, 48,  177, 178, 51,  180, 53,  54,  183, 184,
    57,  58,  187, 60,  189, 190, 63,  192, 65,  66,  195, 68,  197, 198, 71,  72,  201, 202, 75,
    204, 77,  78,  207, 80,  209, 210, 83,  212, 85,  86,  215, 216, 89,  90,  219, 92,  221, 222,
    95,  96,  225, 226, 99,  228, 101, 102, 231, 232, 105, 106, 235, 108, 237, 238, 111, 240, 113,
    114, 243, 116, 245, 246, 119, 120, 249, 250, 123, 252, 125, 126, 255,
};

// IQ4_NL / IQ4_XS non-linear levels.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
// E2M1 values doubled (MXFP4, NVFP4): their block scales are halved to match.
inline constexpr int8_t kFp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// IQ1_S / IQ1_M: the offset added to every grid value, its sign chosen per group.
inline constexpr float kIq1Delta = 0.125f;

}  // namespace gemmaserve::cpu::ggml_codebook

// tiles.h - the AMX instructions our kernels use, behind one set of macros, so that one kernel
// source builds twice: on the hardware (a file that defines RG_TILES_HW before including this,
// compiled with -mamx-tile -mamx-bf16 -mamx-int8: the intrinsics) and emulated (everything else:
// C functions on a per-thread emulated register file, tiles_emu.c).
//
//   RG_TILE_LOADCONFIG(cfg)           LDTILECFG: cfg points at an rg_tile_config (64 bytes)
//   RG_TILE_RELEASE()                 TILERELEASE
//   RG_TILE_ZERO(t)                   TILEZERO tmm t
//   RG_TILE_LOADD(t, base, stride)    TILELOADD: rows of colsb bytes from base, stride bytes apart
//   RG_TILE_STORED(t, base, stride)   TILESTORED
//   RG_TILE_DPBF16PS(c, a, b)         TDPBF16PS: c (F32, rows x N) += a (rows x K pairs of BF16)
//                                     . b (K pair-rows x N columns, the pairs of column j side by side)
//   RG_TILE_DPBUSD(c, a, b)           TDPBUSD: c (S32) += a (u8 quads) . b (s8 quads)
//   RG_TILE_BOUNDS(base, bytes)       emulation only: loads and stores must stay inside the windows
//                                     declared since the last LOADCONFIG (no-op on the hardware)
//   RG_TILE_CHECK_RELEASED()          emulation only: faults when this thread still holds a config
// Tile numbers (t, c, a, b) must be integer constants 0..7: the hardware encodes them in the
// instruction.
//
// The emulation computes TDPBF16PS as the Intel SDM's pseudo-code does (gemm_tiles.h, RG_TILES_AMX:
// per row m and column n, partial sums e and o from zero over the pairs k of a's row, each
// fl(s + x*y) with the product exact, denormal inputs read as zero and denormal results flushed,
// round to nearest even; then c = fl(c + fl(e + o))), and TDPBUSD as dword sums of 4 products of
// unsigned a and signed b bytes, wrapping in 32 bits. Rows past a tile's rows and bytes past its
// colsb are zero after every write, as on the hardware.
//
// It refuses what the hardware refuses (#GP for LDTILECFG, #UD for the rest) and a few things our
// kernels must never do; each refusal (rg_tile_rule) reports the kernel's file and line through
// the fault hook, then the instruction does nothing. The default hook prints the rule and aborts,
// like the CUDA host execution's refusals; tests install a recording hook.
#ifndef RG_CPU_TILES_H
#define RG_CPU_TILES_H

#include <stddef.h>
#include <stdint.h>

#define RG_TILE_COUNT 8      // tmm0 .. tmm7
#define RG_TILE_MAX_ROWS 16  // palette 1
#define RG_TILE_MAX_COLSB 64

// LDTILECFG's 64-byte operand, palette 1.
typedef struct rg_tile_config {
    uint8_t palette_id;   // 1 (0 = release everything)
    uint8_t start_row;    // 0: no interrupted load to restart
    uint8_t reserved[14]; // zero
    uint16_t colsb[16];   // bytes per row of tile t (t < 8; entries 8-15 zero)
    uint8_t rows[16];     // rows of tile t (t < 8; entries 8-15 zero)
} rg_tile_config;
_Static_assert(sizeof(rg_tile_config) == 64, "LDTILECFG reads 64 bytes");

// A tile configured as `rows` rows of `colsb` bytes.
static inline void rg_tile_config_set(rg_tile_config *cfg, int t, int rows, int colsb) {
    cfg->rows[t] = (uint8_t)rows;
    cfg->colsb[t] = (uint16_t)colsb;
}

// What the emulation refuses. The first group is the hardware's (#GP, #UD), the second ours.
typedef enum rg_tile_rule {
    RG_TILE_RULE_NONE = 0,
    RG_TILE_RULE_PALETTE,        // LDTILECFG: palette_id other than 0 or 1                    (#GP)
    RG_TILE_RULE_RESERVED,       // LDTILECFG: reserved bytes, start_row or tiles 8-15 not zero (#GP)
    RG_TILE_RULE_SHAPE,          // LDTILECFG: rows > 16, colsb > 64, or one of them 0 and not the other (#GP)
    RG_TILE_RULE_UNCONFIGURED,   // a tile instruction with no configuration loaded             (#UD)
    RG_TILE_RULE_TILE_UNUSED,    // a tile of 0 rows / 0 bytes (not configured) used            (#UD)
    RG_TILE_RULE_REGISTER,       // a tile number outside 0..7                                  (#UD)
    RG_TILE_RULE_DP_SAME,        // one tile twice in a dot product                            (#UD)
    RG_TILE_RULE_DP_COLSB,       // dot product: a colsb of c, a or b not a multiple of 4       (#UD)
    RG_TILE_RULE_DP_ROWS,        // dot product: c.rows != a.rows                               (#UD)
    RG_TILE_RULE_DP_K,           // dot product: a.colsb != 4 * b.rows                          (#UD)
    RG_TILE_RULE_DP_N,           // dot product: c.colsb != b.colsb                             (#UD)
    RG_TILE_RULE_BOUNDS,         // ours: a load/store touches bytes outside every RG_TILE_BOUNDS window
    RG_TILE_RULE_RECONFIG,       // ours: LOADCONFIG while a configuration is held (no RELEASE between)
    RG_TILE_RULE_RELEASE,        // ours: RELEASE with no configuration held
    RG_TILE_RULE_NOT_RELEASED,   // ours: RG_TILE_CHECK_RELEASED found a configuration still held
    RG_TILE_RULE_COUNT
} rg_tile_rule;

// "palette", "reserved", ... (a word per rule, for messages and tests).
const char *rg_tile_rule_name(rg_tile_rule rule);

// Called on every refusal: the kernel's file and line, the rule, and a sentence with the values.
typedef void (*rg_tile_fault_fn)(void *user, const char *file, int line, rg_tile_rule rule, const char *message);
// Installs fn (process-wide; NULL puts back the default: the message on stderr, then abort()).
void rg_tile_set_fault_hook(rg_tile_fault_fn fn, void *user);

// The emulated instructions (tiles_emu.c); file/line are the call site in the kernel.
void rg_tile_emu_loadconfig(const void *cfg, const char *file, int line);
void rg_tile_emu_release(const char *file, int line);
void rg_tile_emu_zero(int t, const char *file, int line);
void rg_tile_emu_loadd(int t, const void *base, size_t stride, const char *file, int line);
void rg_tile_emu_stored(int t, void *base, size_t stride, const char *file, int line);
void rg_tile_emu_dpbf16ps(int c, int a, int b, const char *file, int line);
void rg_tile_emu_dpbusd(int c, int a, int b, const char *file, int line);
void rg_tile_emu_bounds(const void *base, size_t bytes, const char *file, int line);
void rg_tile_emu_check_released(const char *file, int line);
// Emulation only, for tests: 1 when this thread holds a configuration.
int rg_tile_emu_configured(void);

#if defined(RG_TILES_HW)
#include <immintrin.h>
// GCC's intrinsics tell the compiler less than the instructions do: _tile_loadconfig declares 8 of
// the 64 bytes it reads, _tile_loadd no memory at all. A compiler barrier before each keeps every
// store to the packed tiles (and the staged C) ahead of the instruction; the configuration, a
// local whose address need not escape, is named as read whole (all 64 bytes) by an empty asm, so
// no store to it is dropped as dead.
#define RG_TILE_BARRIER() __asm__ volatile("" ::: "memory")
#define RG_TILE_LOADCONFIG(cfg) \
    do { __asm__ volatile("" : : "m"(*(const rg_tile_config *)(cfg)) : "memory"); _tile_loadconfig(cfg); } while (0)
#define RG_TILE_RELEASE() _tile_release()
#define RG_TILE_ZERO(t) _tile_zero(t)
#define RG_TILE_LOADD(t, base, stride) do { RG_TILE_BARRIER(); _tile_loadd(t, base, stride); } while (0)
#define RG_TILE_STORED(t, base, stride) _tile_stored(t, base, stride)
#define RG_TILE_DPBF16PS(c, a, b) _tile_dpbf16ps(c, a, b)
#define RG_TILE_DPBUSD(c, a, b) _tile_dpbusd(c, a, b)
#define RG_TILE_BOUNDS(base, bytes) ((void)(base), (void)(bytes))
#define RG_TILE_CHECK_RELEASED() ((void)0)
#else
#define RG_TILE_LOADCONFIG(cfg) rg_tile_emu_loadconfig(cfg, __FILE__, __LINE__)
#define RG_TILE_RELEASE() rg_tile_emu_release(__FILE__, __LINE__)
#define RG_TILE_ZERO(t) rg_tile_emu_zero(t, __FILE__, __LINE__)
#define RG_TILE_LOADD(t, base, stride) rg_tile_emu_loadd(t, base, (size_t)(stride), __FILE__, __LINE__)
#define RG_TILE_STORED(t, base, stride) rg_tile_emu_stored(t, base, (size_t)(stride), __FILE__, __LINE__)
#define RG_TILE_DPBF16PS(c, a, b) rg_tile_emu_dpbf16ps(c, a, b, __FILE__, __LINE__)
#define RG_TILE_DPBUSD(c, a, b) rg_tile_emu_dpbusd(c, a, b, __FILE__, __LINE__)
#define RG_TILE_BOUNDS(base, bytes) rg_tile_emu_bounds(base, (size_t)(bytes), __FILE__, __LINE__)
#define RG_TILE_CHECK_RELEASED() rg_tile_emu_check_released(__FILE__, __LINE__)
#endif

#endif

// session_state.h - a session's state saved to a file and loaded back (llama.cpp's state files): the tokens'
// keys and values and the recurrent state, so a later process continues the sequence without evaluating it again.
//
// The file (session_state.c has the byte layout) holds a fingerprint of the model that must match on load, the
// build's state layout version, the position n_past, rows 0..n_past of every per-token buffer (not the whole
// context) and every per-sequence buffer, the recurrent-state snapshots the session keeps for rewinds
// (RETRO_RECURRENT_ROLLBACK=auto, infer/session_snap.c; format version 2), then a checksum. It is written under a temporary name, fsynced and
// renamed, so a crash or a full disk never leaves half a file under the name. Only the session's state is in
// it: not the sampler (its draw counter and penalty window), not the LoRA adapter the session applies (a hash of
// it is: a file saved with one loads only into a session that applies the same one at the same scale).
#ifndef RG_INFER_SESSION_STATE_H
#define RG_INFER_SESSION_STATE_H

#include "infer/session.h"

// Writes s's state to path. Refused (RG_ERR_ARG) when the session's recurrent state is lost (a failed
// single-token step or a truncation to 0 < n_past: it matches no position). On a CUDA device the cache and the
// recurrent state are downloaded first. Errors name the path (and the bytes written when a write fails); path is
// then untouched.
// rg_session_state_save and _load act on sequence 0; the _seq forms on any (RG_ERR_ARG naming the session's
// sequences for one it does not hold). A file holds one sequence, whichever it was saved from: it loads into any
// sequence of a session of the same model, the others untouched.
rg_status rg_session_state_save(rg_session *s, const char *path, rg_error *err);
rg_status rg_session_state_save_seq(rg_session *s, int seq, const char *path, rg_error *err);
// Replaces s's state with path's: n_past becomes the file's, the next rg_session_eval continues from it as the
// saved session would have. Everything is checked before s is touched (the magic, the format and layout
// versions, the model's fingerprint field by field, the adapter, n_past against s's context, every record's size, a
// truncated file, trailing bytes, the checksum, the snapshots' sizes and positions); any failure leaves s exactly as
// it was. s's snapshots become the file's, as many as s keeps (session.h's rg_session_rewind); a version 1 file
// (no snapshots) loads with none. s's context may differ from the saving session's as long as n_past fits. On a
// CUDA device the state and the snapshots are uploaded after the copy; if that upload fails the session starts
// over (n_past 0, a recurrent state lost, no snapshots) and the error says so.
rg_status rg_session_state_load(rg_session *s, const char *path, rg_error *err);
rg_status rg_session_state_load_seq(rg_session *s, int seq, const char *path, rg_error *err);

#endif

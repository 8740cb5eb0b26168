// agent_engine.h - the agent's generator (agent.h's rg_agent_generate_fn) on the continuous-batching engine
// (infer/engine.h) with one slot: each generation renders the whole conversation with the model's chat template,
// the tools and the generation prompt, tokenizes it (special-token text recognized; BOS first when the model asks
// for it and the template did not write it), and submits it. The slot keeps the tokens of the previous prompt and
// its reply, and reuses the longest prefix the new prompt shares with them: a conversation that grew by a result
// feeds only the new text, and one cut back after a failed call rewinds exactly to the conversation before the
// call (rg_agent_gen.n_reused says how many tokens were reused). Generation stops at the model's
// end-of-generation tokens, at max_tokens, or at the end of the context; the text is decoded without special
// tokens, as the server does.
#ifndef RG_AGENT_AGENT_ENGINE_H
#define RG_AGENT_AGENT_ENGINE_H

#include <stdint.h>

#include "agent/agent.h"
#include "graph/exec.h"
#include "infer/sampler.h"
#include "model/model.h"
#include "retrograd.h"
#include "text/chat.h"
#include "text/tokenizer.h"

typedef struct rg_agent_engine rg_agent_engine;

typedef struct rg_agent_engine_opts {
    const rg_model *model;          // not owned; outlive the generator
    const rg_tokenizer *tok;
    const rg_chat_template *tmpl;
    const struct rg_lora *lora;     // or NULL
    float lora_scale;
    rg_sampler_params sampling;
    int64_t n_ctx;                  // <= 0: the model's, at most 4096
    int64_t max_tokens;             // per generation; <= 0: 1024
    int n_threads;                  // <= 0: all cores
    rg_device device;
} rg_agent_engine_opts;

rg_status rg_agent_engine_create(rg_agent_engine **out, const rg_agent_engine_opts *opts, rg_error *err);
void rg_agent_engine_free(rg_agent_engine *e);

// The generator: pass rg_agent_engine_generate as rg_agent_opts.generate and the engine as generate_user.
rg_status rg_agent_engine_generate(void *engine, const rg_chat_message *msgs, size_t n_msgs, const rg_json *tools,
                                   rg_agent_gen *out, rg_error *err);

#endif

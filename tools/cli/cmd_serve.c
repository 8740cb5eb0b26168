// cmd_serve.c - `retrograd serve`: an OpenAI-compatible HTTP server over one model (src/serve/).
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "model/lora.h"
#include "serve/serve_http.h"
#include "serve/server.h"

static volatile sig_atomic_t stop_flag;
static void on_signal(int sig) {
    (void)sig;
    stop_flag = 1;
}

// The key in a file: its first line, without the line end; NULL (message printed) when unreadable or empty.
static char *key_from_file(const char *path) {
    size_t n;
    char *k = cli_read_file(path, &n);
    if (!k) {
        fprintf(stderr, "retrograd serve: --api-key-file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    k[strcspn(k, "\r\n")] = 0;
    if (!*k) {
        fprintf(stderr, "retrograd serve: --api-key-file %s: the file's first line is empty\n", path);
        free(k);
        return NULL;
    }
    return k;
}

static void serve_epilog(FILE *f) {
    fputs("\nRoutes: GET /v1/models, POST /v1/chat/completions, POST /v1/completions (OpenAI's shapes; \"stream\": true\n"
          "for server-sent events), POST /tokenize, POST /detokenize, GET /health (503 while loading), GET /metrics\n"
          "(Prometheus text). Loopback only unless an API key is given. docs/SERVE.md has the details.\n",
          f);
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *alias = NULL, *slot_dir = NULL, *lora_dir = NULL, *agent_tools = NULL, *host = "127.0.0.1", *key = NULL, *key_file = NULL;
    int64_t port = 8080, n_slots = 4, n_ctx = 0, threads = 0, max_tokens = 0, max_body = 8 << 20, max_conn = 64,
            max_queue = 64, max_messages = 1024;
    const char *files_dir = NULL;  // fine-tuning (docs/SERVE.md "Fine-tuning jobs")
    int64_t max_upload = (int64_t)100 << 20, job_threads = 0;
    rg_device device = RG_DEVICE_CPU;
    cli_loras loras = {0};
    const cli_opt opts[] = {
        CLI_STR('m', "--model", "MODEL.gguf", "the model to serve", &model),
        CLI_CALL(0, "--lora", "A.gguf[:SCALE]", "an adapter loaded at launch (repeatable; ids 0, 1, ... in order; "
                 "requests use it at SCALE, default 1, unless they say otherwise)", cli_opt_lora, &loras),
        CLI_STR(0, "--alias", "NAME", "its id in /v1/models (default: the file's name without .gguf)", &alias),
        CLI_STR(0, "--host", "ADDR", "address to listen on (default 127.0.0.1; any other needs an API key)", &host),
        CLI_I64(0, "--port", "N", "port (default 8080; 0 picks a free one, printed)", 0, 65535, &port),
        CLI_STR(0, "--api-key", "K", "require Authorization: Bearer K on every route but /health", &key),
        CLI_STR(0, "--api-key-file", "F", "the same, the key read from the first line of F", &key_file),
        CLI_I64(0, "-np", "N", "slots: requests decoded together in one batch (default 4)", 1, 256, &n_slots),
        CLI_I64('c', "--ctx-size", "N", "tokens per slot (default: the model's, at most 4096)", 0, INT32_MAX, &n_ctx),
        CLI_I64('t', "--threads", "N", "CPU threads (default: all cores)", 0, 1024, &threads),
        CLI_CALL(0, "--device", "cpu|cuda", "where the model runs (default cpu)", cli_opt_device, &device),
        CLI_I64(0, "--max-tokens", "N", "the most tokens a request may ask for (default: the context)", 0,
                INT32_MAX, &max_tokens),
        CLI_STR(0, "--slot-save-path", "DIR", "where POST /slots/N?action=save writes slot files (names the server "
                "makes; restore takes only those)", &slot_dir),
        CLI_STR(0, "--agent", "TOOLS.yaml", "chat requests without tools of their own run the agent loop: the "
                "model's calls to these tools run here (docs/SERVE.md \"The agent\")", &agent_tools),
        CLI_STR(0, "--lora-dir", "DIR", "the folder POST /lora-adapters/load takes adapters from (by plain name)",
                &lora_dir),
        CLI_I64(0, "--max-body", "BYTES", "the largest request body (default 8 MiB)", 1024, INT32_MAX, &max_body),
        CLI_I64(0, "--max-connections", "N", "parallel connections (default 64)", 1, 4096, &max_conn),
        CLI_I64(0, "--max-queue", "N", "requests waiting for a slot before 429 (default 64)", 1, 1 << 20, &max_queue),
        CLI_I64(0, "--max-messages", "N", "messages in one chat request (default 1024)", 1, 1 << 20, &max_messages),
        CLI_STR(0, "--files-dir", "DIR", "uploaded files and fine-tuning jobs (kept across restarts; default "
                "$TMPDIR/retrograd-serve-PID)", &files_dir),
        CLI_I64(0, "--max-upload", "BYTES", "the largest file POST /v1/files takes (default 100 MiB)", 1024,
                (int64_t)1 << 40, &max_upload),
        CLI_I64(0, "--job-threads", "N", "CPU threads of a fine-tuning job's training process, which runs in the "
                "idle scheduling class (default: all cores)", 0, 1024, &job_threads),
    };
    const cli_command c = {"serve", "-m MODEL.gguf [--lora A.gguf[:SCALE]]... [--host ADDR] [--port N] [--api-key K] "
                           "[-np N] [-c CTX]", opts,
                           CLI_N(opts), .epilog = serve_epilog};
    const int rc = cli_args_parse(&c, argc, argv);
    if (rc != CLI_ARGS_OK) return rc == CLI_ARGS_HELP ? 0 : 2;
    if (!model) {
        fprintf(stderr, "retrograd serve: no model (-m MODEL.gguf)\n");
        return 2;
    }
    if (key && key_file) {
        fprintf(stderr, "retrograd serve: give --api-key or --api-key-file, not both\n");
        return 2;
    }
    char *file_key = key_file ? key_from_file(key_file) : NULL;
    if (key_file && !file_key) return 2;
    if (file_key) key = file_key;
    if (!rg_serve_host_is_loopback(host) && !key) {
        fprintf(stderr, "retrograd serve: --host %s is not a loopback address: give --api-key K or --api-key-file F\n",
                host);
        free(file_key);
        return 2;
    }
    char lora_path[RG_SERVE_MAX_LORA][1024];
    const char *lora_paths[RG_SERVE_MAX_LORA];
    float lora_scales[RG_SERVE_MAX_LORA];
    if (loras.n > RG_SERVE_MAX_LORA) {
        fprintf(stderr, "retrograd serve: %d --lora adapters; at most %d\n", loras.n, RG_SERVE_MAX_LORA);
        free(file_key);
        return 2;
    }
    for (int i = 0; i < loras.n; i++) {
        if (!rg_lora_parse_spec(loras.spec[i], lora_path[i], sizeof lora_path[i], &lora_scales[i])) {
            fprintf(stderr, "retrograd serve: --lora '%s': expected A.gguf or A.gguf:SCALE\n", loras.spec[i]);
            free(file_key);
            return 2;
        }
        lora_paths[i] = lora_path[i];
    }
    char files_tmp[4096];
    if (!files_dir) {
        const char *t = getenv("TMPDIR");
        snprintf(files_tmp, sizeof files_tmp, "%s/retrograd-serve-%d", t && *t ? t : "/tmp", (int)getpid());
        files_dir = files_tmp;
    }
    rg_server_opts so = {.files_dir = files_dir, .max_upload = max_upload, .job_threads = (int)job_threads, .slot_save_path = slot_dir, .lora_dir = lora_dir, .agent_tools_path = agent_tools, .lora_paths = lora_paths, .lora_scales = lora_scales, .n_lora = loras.n,.model_path = model, .alias = alias, .n_slots = (int)n_slots, .n_ctx = n_ctx,
                         .n_threads = (int)threads, .device = device, .max_queue = (int)max_queue,
                         .load_in_background = true,
                         .limits = {.max_body = (size_t)max_body, .max_tokens = max_tokens,
                                    .max_messages = (size_t)max_messages}};
    rg_error err;
    rg_server *s;
    if (rg_server_create(&s, &so, &err)) {
        fprintf(stderr, "retrograd %s\n", err.msg);
        free(file_key);
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    rg_serve_http_opts ho = {.host = host, .port = (int)port, .api_key = key, .max_connections = (int)max_conn};
    const rg_status st = rg_serve_http_run(s, &ho, &stop_flag, &err);
    if (st) fprintf(stderr, "retrograd %s\n", err.msg);
    const bool load_failed = !st && rg_server_state(s) < 0;
    if (load_failed) fprintf(stderr, "retrograd serve: %s\n", rg_server_load_error(s));
    rg_server_free(s);
    free(file_key);
    return st || load_failed ? 1 : 0;
}

// api_stream.cpp - the CUDA runtime's stream, event and graph calls for the
// host execution, over queue.cpp: each takes the runtime lock and returns the
// sticky error of a faulted device first.
#include "cuda_host/queue.h"
#include "cuda_host/state.h"

using namespace rgh;

cudaError_t cudaStreamCreate(cudaStream_t *s) {
    RGH_ENTER();
    return stream_create(s, cudaStreamDefault);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    RGH_ENTER();
    return stream_create(s, flags);
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    RGH_ENTER();
    return stream_destroy(s);
}

cudaError_t cudaStreamSynchronize(cudaStream_t hs) {
    RGH_ENTER();
    Stream *s = find_stream(hs, "cudaStreamSynchronize");
    return s ? sync_stream(s) : cudaErrorInvalidResourceHandle;
}

// Nothing runs in the background here, so a query runs the stream's work: a
// loop that polls until the work is done ends.
cudaError_t cudaStreamQuery(cudaStream_t hs) {
    RGH_ENTER();
    Stream *s = find_stream(hs, "cudaStreamQuery");
    if (!s) return cudaErrorInvalidResourceHandle;
    if (stream_capturing(s)) return set_error(cudaErrorStreamCaptureUnsupported, "cudaStreamQuery of a stream that captures");
    return sync_stream(s);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    RGH_ENTER();
    if (flags & ~(unsigned)cudaEventWaitExternal)
        return set_error(cudaErrorInvalidValue, "cudaStreamWaitEvent: unknown flags 0x%x", flags);
    return stream_wait_event(s, e);
}

cudaError_t cudaLaunchHostFunc(cudaStream_t hs, cudaHostFn_t fn, void *user_data) {
    RGH_ENTER();
    Stream *s = find_stream(hs, "cudaLaunchHostFunc");
    if (!s) return cudaErrorInvalidResourceHandle;
    if (!fn) return set_error(cudaErrorInvalidValue, "cudaLaunchHostFunc: NULL function");
    return submit(s, simple_work("cudaLaunchHostFunc", [fn, user_data] { fn(user_data); }, true));
}

cudaError_t cudaEventCreate(cudaEvent_t *e) {
    RGH_ENTER();
    return event_create(e, cudaEventDefault);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    RGH_ENTER();
    return event_create(e, flags);
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    RGH_ENTER();
    return event_record(e, s);
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
    RGH_ENTER();
    return event_query(e, false);
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    RGH_ENTER();
    return event_query(e, true);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    RGH_ENTER();
    return event_elapsed(ms, start, end);
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    RGH_ENTER();
    return event_destroy(e);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    RGH_ENTER();
    return capture_begin(s, mode);
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
    RGH_ENTER();
    return exchange_capture_mode(mode);
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *graph) {
    RGH_ENTER();
    return capture_end(s, graph);
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status) {
    RGH_ENTER();
    if (!status) return set_error(cudaErrorInvalidValue, "cudaStreamIsCapturing: NULL status");
    return capture_status(s, status);
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    RGH_ENTER();
    (void)flags;
    return graph_instantiate(exec, graph);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    RGH_ENTER();
    return graph_launch(exec, s);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    RGH_ENTER();
    return graph_exec_destroy(exec);
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    RGH_ENTER();
    return graph_destroy(graph);
}

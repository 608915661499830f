/* OpenAI response objects and SSE chunks, built with cJSON. The stream
 * functions append to j->out and are called with j->mu held. */
#ifndef LPX_SERVER_OPENAI_H
#define LPX_SERVER_OPENAI_H

#include "server/job.h"
#include "server/params.h"

/* {"error": {"message", "type", "param", "code"}} (malloc'd, NULL on OOM). */
char *lpx_oa_error(const lpx_srv_error *e);
/* Chat streams open with one {"role": "assistant"} delta per choice, others
 * with an SSE comment. */
bool lpx_oa_stream_open(lpx_job *j);
/* One engine event of choice c as a chunk (nothing when it carries neither
 * text, logprobs nor a finish). */
bool lpx_oa_stream_event(lpx_job *j, lpx_job_choice *c, const lpx_event *ev);
/* The end: the abort error or the usage chunk as asked, then [DONE]. */
bool lpx_oa_stream_close(lpx_job *j);
/* The whole non-streaming body of a finished job (malloc'd, NULL on OOM). */
char *lpx_oa_response(const lpx_job *j, double elapsed_ms);
/* The finish_reason string clients see. */
const char *lpx_oa_finish(lpx_finish_reason r);

#endif

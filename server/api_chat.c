/*
 * api_chat.c - POST /v1/chat/completions, for models without a chat template.
 *
 * Why it exists: a chat request needs the model's chat template to turn messages
 * into a prompt, and no model we serve has one (OPT is a plain language model).
 * Without this handler the path was a 404 "No route", which clients such as
 * LangChain's ChatOpenAI report as "model not found" and send the user looking in
 * the wrong place. The answer is now vLLM's for a tokenizer without a chat template:
 * a 400 invalid_request_error saying so (api_tokenize_no_chat_template). Real chat support
 * replaces this file when a model family with a template arrives.
 *
 * What is checked, in order: the API key (router.c, as for all of /v1: 401), the
 * method (405), the body is a JSON object (400, the same checks as every POST body),
 * "model", when given, names the served model (404 model_not_found, as the chat
 * endpoint of OpenAI and vLLM answers); everything else gets the chat-template 400.
 * Thread: loop.
 */
#include "api_chat.h"

#include "api_tokenize.h"
#include "reply.h"
#include "srv.h"

void api_chat_route(struct exch *x)
{
    if (!reply_method_is(x, "POST")) return;
    const struct srv *s = x->c->s;
    struct api_error e = {0};
    cJSON *root = json_parse_object(x->req->body ? x->req->body : "", x->req->body_len, &e);
    if (root && !json_model_check(json_field(root, "model"), s->model_id, &e))
        api_tokenize_no_chat_template(&e, s->model_id);
    cJSON_Delete(root);
    conn_error(x, &e);
}

/*
 * test_chat.c - POST /v1/chat/completions without the network: the request side
 * (server/chat.c: messages, content parts, the fields chat reads itself, what it
 * refuses, the prompt ids the template's text gives) and the chat shape of responses
 * (cmpl_resp with params.chat: chat.completion bodies, chunks with the role first,
 * logprobs.content). The template is a stand-in written here; the real template
 * engine has its own tests.
 */
#include "api_testlib.h"
#include "chat.h"
#include "cmpl_resp.h"

#include <stdio.h>

/* "<role>: content\n" per message, then "assistant:" with the generation prompt;
 * a message saying "refuse" makes it fail, as raise_exception would. */
static int toy_render(const void *ctx, const struct chat_message *msgs, int32_t n,
                      bool add_generation_prompt, char **prompt, char **error)
{
    (void)ctx;
    size_t cap = 64, len = 0;
    char *out = xmalloc(cap);
    out[0] = '\0';
    for (int32_t i = 0; i < n; i++) {
        if (strcmp(msgs[i].content, "refuse") == 0) {
            free(out);
            *error = xstrdup("Conversation roles must alternate");
            return -1;
        }
        const size_t need = len + strlen(msgs[i].role) + strlen(msgs[i].content) + 8;
        if (need > cap) out = xrealloc(out, cap = 2 * need);
        len += (size_t)sprintf(out + len, "%s: %s\n", msgs[i].role, msgs[i].content);
    }
    if (add_generation_prompt) {
        out = xrealloc(out, len + 16);
        strcpy(out + len, "assistant:");
    }
    *prompt = out;
    return 0;
}

static struct chat_model chat_model_of(const struct api_model *m)
{
    return (struct chat_model){.m = m, .render = toy_render};
}

static int chat(const struct chat_model *cm, const char *body, struct cmpl_params *p,
                struct api_error *e)
{
    const char *b = q(body);
    return chat_parse(b, strlen(b), cm, p, e);
}

TEST(messages_become_the_templates_prompt_ids)
{
    struct api_model m;
    model_init(&m, byte_tok);
    m.max_model_len = 512;
    const struct chat_model cm = chat_model_of(&m);
    struct cmpl_params p;
    struct api_error e = {0};
    EXPECT_EQ(chat(&cm,
                   "{" M ",'messages':[{'role':'system','content':'Be brief.'},"
                   "{'role':'user','content':[{'type':'text','text':'Hi'},"
                   "{'type':'text','text':'there'}]}]}",
                   &p, &e),
              0);
    EXPECT(p.chat);
    EXPECT_EQ(p.n_prompts, 1);
    /* The byte tokenizer: each byte b is id 4 + b, and no BOS is added. */
    const char *want = "system: Be brief.\nuser: Hi\nthere\nassistant:";
    EXPECT_EQ(p.prompts[0].n_ids, (int32_t)strlen(want));
    bool same = p.prompts[0].n_ids == (int32_t)strlen(want);
    for (int32_t i = 0; same && i < p.prompts[0].n_ids; i++)
        same = p.prompts[0].ids[i] == 4 + (unsigned char)want[i];
    EXPECT(same);
    /* No max_tokens: to the end of the context. */
    EXPECT_EQ(p.max_tokens, 512 - (int32_t)strlen(want));
    EXPECT_EQ(p.logprobs, -1);
    cmpl_params_free(&p);
    api_error_clear(&e);
}

TEST(fields_chat_reads_itself)
{
    struct api_model m;
    model_init(&m, byte_tok);
    m.max_model_len = 512;
    const struct chat_model cm = chat_model_of(&m);
    struct cmpl_params p;
    struct api_error e = {0};
    const char *msg = "'messages':[{'role':'user','content':'x'}]";
    char body[512];
    /* max_completion_tokens wins over max_tokens; logprobs + top_logprobs map to
     * completions' logprobs; the shared fields mean what they mean there. */
    snprintf(body, sizeof body,
             "{" M ",%s,'max_tokens':9,'max_completion_tokens':5,'logprobs':true,"
             "'top_logprobs':3,'temperature':0.5,'n':2,'stop':['\\n'],'seed':7,"
             "'stream':true,'stream_options':{'include_usage':true},"
             "'response_format':{'type':'text'},'tools':[],'tool_choice':'none',"
             "'add_generation_prompt':false,'some_future_field':1}",
             msg);
    EXPECT_EQ(chat(&cm, body, &p, &e), 0);
    EXPECT_EQ(p.max_tokens, 5);
    EXPECT_EQ(p.logprobs, 3);
    EXPECT(p.temperature == 0.5f && p.n == 2 && p.n_stops == 1 && p.has_seed && p.stream &&
           p.include_usage);
    EXPECT_EQ(p.prompts[0].n_ids, (int32_t)strlen("user: x\n"));
    cmpl_params_free(&p);
    snprintf(body, sizeof body, "{" M ",%s,'logprobs':true}", msg);
    EXPECT_EQ(chat(&cm, body, &p, &e), 0);
    EXPECT_EQ(p.logprobs, 0);
    cmpl_params_free(&p);
    api_error_clear(&e);
}

TEST(bad_and_unsupported_requests_name_their_param)
{
    struct api_model m;
    model_init(&m, byte_tok);
    const struct chat_model cm = chat_model_of(&m);
    static const struct {
        const char *body;
        int status;
        const char *param; /* NULL: none */
        const char *says;
    } cases[] = {
        {"{" M "}", 400, "messages", "messages"},
        {"{" M ",'messages':[]}", 400, "messages", "1 to"},
        {"{" M ",'messages':'hi'}", 400, "messages", "array"},
        {"{" M ",'messages':[5]}", 400, "messages[0]", "object"},
        {"{" M ",'messages':[{'content':'x'}]}", 400, "messages[0].role", "string"},
        {"{" M ",'messages':[{'role':'robot','content':'x'}]}", 400, "messages[0].role",
         "supported roles"},
        {"{" M ",'messages':[{'role':'tool','content':'x'}]}", 400, "messages[0].role",
         "tools"},
        {"{" M ",'messages':[{'role':'user'}]}", 400, "messages[0].content", "Missing"},
        {"{" M
         ",'messages':[{'role':'user','content':[{'type':'image_url','image_url':{}}]}]}",
         400, "messages[0].content", "text-only"},
        {"{" M ",'messages':[{'role':'user','content':[{'text':'x'}]}]}", 400,
         "messages[0].content", "type"},
        {"{" M ",'messages':[{'role':'assistant','content':null,'tool_calls':[{}]}]}", 400,
         "messages[0].tool_calls", "Tool calls"},
        {"{" M ",'messages':[{'role':'user','content':'x'}],'tools':[{'type':'function'}]}",
         400, "tools", "Tools"},
        {"{" M ",'messages':[{'role':'user','content':'x'}],'tool_choice':'auto'}", 400,
         "tool_choice", "tool_choice"},
        {"{" M ",'messages':[{'role':'user','content':'x'}],"
         "'response_format':{'type':'json_object'}}",
         400, "response_format", "JSON mode"},
        {"{" M ",'messages':[{'role':'user','content':'x'}],'modalities':['text','audio']}",
         400, "modalities", "text"},
        {"{" M ",'messages':[{'role':'user','content':'x'}],'echo':true}", 400, "echo",
         "echo"},
        {"{" M ",'messages':[{'role':'user','content':'x'}],'top_logprobs':2}", 400,
         "top_logprobs", "logprobs set to true"},
        {"{" M
         ",'messages':[{'role':'user','content':'x'}],'logprobs':true,'top_logprobs':9}",
         400, "top_logprobs", "at most 5"},
        {"{" M ",'messages':[{'role':'user','content':'x'}],'logprobs':3}", 400, "logprobs",
         "boolean"},
        {"{" M ",'messages':[{'role':'user','content':'x'}],'temperature':5}", 400,
         "temperature", "temperature"},
        {"{" M ",'messages':[{'role':'user','content':'refuse'}]}", 400, "messages",
         "roles must alternate"},
        {"{" M ",'messages':[{'role':'user','content':'x'}],'max_tokens':100000}", 400,
         "max_tokens", "context length"},
        {"{'model':'gpt-4','messages':[{'role':'user','content':'x'}]}", 404, "model",
         "does not exist"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        struct cmpl_params p;
        struct api_error e = {0};
        const bool before = test_cur_failed;
        test_cur_failed = false;
        EXPECT_EQ(chat(&cm, cases[i].body, &p, &e), -1);
        EXPECT_EQ(e.status, cases[i].status);
        EXPECT_STR(e.param, cases[i].param);
        EXPECT(e.message && strstr(e.message, cases[i].says) != NULL);
        if (test_cur_failed)
            printf("# in case %zu: %s -> %d %s: %s\n", i, cases[i].body, e.status,
                   e.param ? e.param : "(null)", e.message ? e.message : "");
        test_cur_failed |= before;
        api_error_clear(&e);
    }
}

TEST(no_template_and_no_tokenizer_are_400)
{
    struct api_model m;
    model_init(&m, byte_tok);
    struct chat_model cm = {.m = &m};
    struct cmpl_params p;
    struct api_error e = {0};
    const char *body = "{" M ",'messages':[{'role':'user','content':'x'}]}";
    EXPECT_EQ(chat(&cm, body, &p, &e), -1);
    EXPECT(e.status == 400 && strstr(e.message, "no chat template"));
    api_error_clear(&e);
    struct tokenizer *none = tokenizer_create_none(512, 2, 2);
    model_init(&m, none);
    cm = chat_model_of(&m);
    EXPECT_EQ(chat(&cm, body, &p, &e), -1);
    EXPECT(e.status == 400 && strstr(e.message, "no tokenizer"));
    api_error_clear(&e);
    tokenizer_destroy(none);
}

static struct req_event tok_event(int32_t token, const char *text, enum req_finish fin)
{
    struct req_event ev;
    memset(&ev, 0, sizeof ev);
    ev.token = token;
    ev.logprob = -0.5f;
    ev.n_top = 2;
    ev.top_ids[0] = token;
    ev.top_ids[1] = 4 + 'z';
    ev.top_logprobs[0] = -0.5f;
    ev.top_logprobs[1] = -1.5f;
    ev.text = (char *)text;
    ev.text_len = strlen(text);
    ev.finish = fin;
    return ev;
}

static cJSON *must_parse(const char *s)
{
    cJSON *o = cJSON_Parse(s);
    if (!o) TEST_FAIL("not JSON: %s", s);
    return o;
}

TEST(the_chat_shape_of_a_body)
{
    struct api_model m;
    model_init(&m, byte_tok);
    m.max_model_len = 512;
    const struct chat_model cm = chat_model_of(&m);
    struct cmpl_params p;
    struct api_error e = {0};
    EXPECT_EQ(chat(&cm,
                   "{" M ",'messages':[{'role':'user','content':'x'}],'logprobs':true,"
                   "'top_logprobs':2}",
                   &p, &e),
              0);
    struct cmpl_resp *r = cmpl_resp_create(&p, byte_tok, "chatcmpl-1", 7);
    struct req_event a = tok_event(4 + 'H', "H", REQ_FINISH_NONE);
    struct req_event b = tok_event(4 + 'i', "i", REQ_FINISH_STOP);
    EXPECT(cmpl_resp_event(r, 0, &a, NULL) == NULL);
    EXPECT(cmpl_resp_event(r, 0, &b, NULL) == NULL);
    EXPECT(cmpl_resp_done(r));
    char *body = cmpl_resp_body(r, NULL);
    cJSON *o = must_parse(body);
    EXPECT_STR(cJSON_GetObjectItem(o, "object")->valuestring, "chat.completion");
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
    const cJSON *msg = cJSON_GetObjectItem(c, "message");
    EXPECT_STR(cJSON_GetObjectItem(msg, "role")->valuestring, "assistant");
    EXPECT_STR(cJSON_GetObjectItem(msg, "content")->valuestring, "Hi");
    EXPECT_STR(cJSON_GetObjectItem(c, "finish_reason")->valuestring, "stop");
    const cJSON *content =
        cJSON_GetObjectItem(cJSON_GetObjectItem(c, "logprobs"), "content");
    EXPECT_EQ(cJSON_GetArraySize(content), 2);
    const cJSON *first = cJSON_GetArrayItem(content, 0);
    EXPECT_STR(cJSON_GetObjectItem(first, "token")->valuestring, "H");
    EXPECT_EQ(cJSON_GetArrayItem(cJSON_GetObjectItem(first, "bytes"), 0)->valueint, 'H');
    EXPECT_EQ(cJSON_GetArraySize(cJSON_GetObjectItem(first, "top_logprobs")), 2);
    EXPECT(cJSON_GetObjectItem(o, "usage") != NULL);
    cJSON_Delete(o);
    free(body);
    cmpl_resp_destroy(r);
    cmpl_params_free(&p);
}

TEST(a_chat_stream_sends_the_role_first)
{
    struct api_model m;
    model_init(&m, byte_tok);
    m.max_model_len = 512;
    const struct chat_model cm = chat_model_of(&m);
    struct cmpl_params p;
    struct api_error e = {0};
    EXPECT_EQ(chat(&cm,
                   "{" M ",'messages':[{'role':'user','content':'x'}],'stream':true,"
                   "'stream_options':{'include_usage':true}}",
                   &p, &e),
              0);
    struct cmpl_resp *r = cmpl_resp_create(&p, byte_tok, "chatcmpl-2", 7);
    /* A first token that releases no text yet still sends the role. */
    struct req_event a = tok_event(4 + 0xC3, "", REQ_FINISH_NONE);
    struct req_event b = tok_event(4 + 0xA9, "\xC3\xA9", REQ_FINISH_NONE);
    struct req_event c = tok_event(2, "", REQ_FINISH_STOP);
    const char *want[3] = {"{\"role\":\"assistant\",\"content\":\"\"}",
                           "{\"content\":\"\xC3\xA9\"}", "{}"};
    struct req_event *evs[3] = {&a, &b, &c};
    for (int k = 0; k < 3; k++) {
        size_t len = 0;
        char *chunk = cmpl_resp_event(r, 0, evs[k], &len);
        EXPECT(chunk != NULL && strncmp(chunk, "data: ", 6) == 0);
        if (!chunk) continue;
        cJSON *o = must_parse(chunk + 6);
        EXPECT_STR(cJSON_GetObjectItem(o, "object")->valuestring, "chat.completion.chunk");
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "choices"), 0);
        char *delta = cJSON_PrintUnformatted(cJSON_GetObjectItem(ch, "delta"));
        EXPECT_STR(delta, want[k]);
        const cJSON *fr = cJSON_GetObjectItem(ch, "finish_reason");
        EXPECT(k < 2 ? cJSON_IsNull(fr) : strcmp(fr->valuestring, "stop") == 0);
        free(delta);
        cJSON_Delete(o);
        free(chunk);
    }
    char *tail = cmpl_resp_stream_tail(r, NULL);
    EXPECT(strstr(tail, "\"object\":\"chat.completion.chunk\"") &&
           strstr(tail, "\"usage\"") && strstr(tail, "data: [DONE]"));
    free(tail);
    cmpl_resp_destroy(r);
    cmpl_params_free(&p);
}

int main(void)
{
    if (api_testlib_init()) return 1;
    RUN(messages_become_the_templates_prompt_ids);
    RUN(fields_chat_reads_itself);
    RUN(bad_and_unsupported_requests_name_their_param);
    RUN(no_template_and_no_tokenizer_are_400);
    RUN(the_chat_shape_of_a_body);
    RUN(a_chat_stream_sends_the_role_first);
    api_testlib_done();
    return test_done();
}

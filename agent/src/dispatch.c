/* dispatch.c — one request line: parse, check the envelope, route by `type` through the
 * table; plus the field readers every handler uses and the session (sync) handler. */
#include "agent.h"
#include "base64.h"
#include "handlers.h"
#include "msg.h"
#include "out.h"

#include <stdlib.h>
#include <string.h>

static const struct handler {
	const char *type;
	void (*fn)(const struct request *rq);
} handlers[] = {
	{"sync", handle_sync},
	{"ping", handle_ping},
	{"info", handle_info},
	{"flush", handle_flush},
	{"exec", handle_exec},
	{"stdin", handle_stdin},
	{"signal", handle_signal},
	{"file_write", handle_file_write},
	{"data", handle_data},
	{"eof", handle_eof},
	{"file_read", handle_file_read},
	{"stat", handle_stat},
	{"list", handle_list},
	{"mkdir", handle_mkdir},
	{"remove", handle_remove},
	{"xattr_set", handle_xattr_set},
	{"configure", handle_configure},
	{"pty_open", handle_pty_open},
	{"pty_attach", handle_pty_attach},
	{"pty_input", handle_pty_input},
	{"pty_resize", handle_pty_resize},
	{"pty_signal", handle_pty_signal},
	{"pty_close", handle_pty_close},
	{"pty_detach", handle_pty_detach},
	{"pty_list", handle_pty_list},
};

static bool blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r')
			return false;
	return true;
}

static const struct handler *lookup(const char *type)
{
	for (size_t i = 0; i < sizeof handlers / sizeof handlers[0]; i++)
		if (strcmp(handlers[i].type, type) == 0)
			return &handlers[i];
	return NULL;
}

static void route(const struct json *msg)
{
	struct request rq = {.msg = msg, .id = -1, .type = NULL};
	int64_t id;
	if (json_int(json_get(msg, "id"), &id) && id >= 0)
		rq.id = id;
	const struct json *type = json_get(msg, "type");
	const struct handler *h = NULL;
	if (type && type->type == JSON_STRING && strlen(type->u.str.s) == type->u.str.len) {
		rq.type = type->u.str.s;
		h = lookup(rq.type);
	}
	if (!h) {
		reply_error(rq.id, "unknown_type", "unknown message type");
		return;
	}
	h->fn(&rq);
}

void dispatch_line(const char *line, size_t len)
{
	if (blank(line, len))
		return;
	struct json_arena arena = {0};
	enum json_error err;
	const struct json *msg = json_parse(&arena, line, len, &err);
	if (!msg) {
		if (err == JSON_TOO_DEEP)
			reply_error(-1, "too_large", "nested deeper than %d", MAX_DEPTH);
		else if (err == JSON_NO_MEMORY)
			reply_error(-1, "too_large", "out of memory parsing the request");
		else
			reply_error(-1, "bad_json", "malformed JSON");
	} else if (msg->type != JSON_OBJECT) {
		reply_error(-1, "bad_json", "a message must be a JSON object");
	} else {
		route(msg);
	}
	json_arena_free(&arena);
}

/* ---- field readers ---- */

static bool bad(const struct request *rq, const char *key, const char *what)
{
	reply_error(rq->id, "bad_request", "%s: \"%s\" %s", rq->type, key, what);
	return false;
}

const struct json *req_field(const struct request *rq, const char *key)
{
	const struct json *v = json_get(rq->msg, key);
	return v && v->type != JSON_NULL ? v : NULL;
}

bool req_need_id(const struct request *rq)
{
	if (rq->id >= 0)
		return true;
	return bad(rq, "id", "must be a non-negative integer");
}

bool req_string(const struct request *rq, const char *key, bool required, const char **out)
{
	const struct json *v = req_field(rq, key);
	if (!v)
		return required ? bad(rq, key, "is required") : true;
	if (v->type != JSON_STRING || memchr(v->u.str.s, '\0', v->u.str.len))
		return bad(rq, key, "must be a string without NUL bytes");
	*out = v->u.str.s;
	return true;
}

bool req_bool(const struct request *rq, const char *key, bool *out)
{
	const struct json *v = req_field(rq, key);
	if (!v)
		return true;
	if (v->type != JSON_BOOL)
		return bad(rq, key, "must be true or false");
	*out = v->u.boolean;
	return true;
}

bool req_uint(const struct request *rq, const char *key, bool required, int64_t max, int64_t *out)
{
	const struct json *v = req_field(rq, key);
	if (!v)
		return required ? bad(rq, key, "is required") : true;
	int64_t n;
	if (!json_int(v, &n) || n < 0 || n > max)
		return bad(rq, key, "must be a non-negative integer in range");
	*out = n;
	return true;
}

/* The base64 string of a field of at most max decoded bytes, or NULL (error replied). */
static const struct json *data_field(const struct request *rq, const char *key, size_t max)
{
	const struct json *v = req_field(rq, key);
	if (!v || v->type != JSON_STRING) {
		bad(rq, key, "must be a base64 string");
		return NULL;
	}
	if (v->u.str.len > BASE64_ENCODED_LEN(max)) {
		reply_error(rq->id, "too_large", "%s: \"%s\" decodes to more than %zu bytes", rq->type,
			    key, max);
		return NULL;
	}
	return v;
}

static bool decode_into(const struct request *rq, const char *key, const struct json *v,
			unsigned char *buf, size_t max, size_t *len)
{
	ssize_t n = base64_decode(buf, v->u.str.s, v->u.str.len);
	if (n < 0 || (size_t)n > max)
		return bad(rq, key, "must be base64 (RFC 4648)");
	*len = (size_t)n;
	return true;
}

bool req_data(const struct request *rq, const char *key, size_t max, unsigned char **out,
	      size_t *len)
{
	const struct json *v = data_field(rq, key, max);
	if (!v)
		return false;
	unsigned char *buf = malloc(BASE64_DECODED_MAX(v->u.str.len) + 1);
	if (!buf) {
		reply_error(rq->id, "io", "%s: out of memory", rq->type);
		return false;
	}
	if (!decode_into(rq, key, v, buf, max, len)) {
		free(buf);
		return false;
	}
	*out = buf;
	return true;
}

bool req_chunk(const struct request *rq, const char *key, const unsigned char **out, size_t *len)
{
	/* One buffer for every chunk: a fresh 192 KiB allocation per upload chunk cost its page
	 * faults each time, which under TCG are dear. */
	static unsigned char buf[BASE64_DECODED_MAX(BASE64_ENCODED_LEN(MAX_CHUNK)) + 1];
	const struct json *v = data_field(rq, key, MAX_CHUNK);
	if (!v || !decode_into(rq, key, v, buf, MAX_CHUNK, len))
		return false;
	*out = buf;
	return true;
}

/* ---- session ---- */

void session_end(void)
{
	exec_session_end();
	files_session_end();
	pty_session_end();
}

void handle_sync(const struct request *rq)
{
	int64_t nonce = -1;
	if (!req_uint(rq, "nonce", true, INT64_MAX, &nonce))
		return;
	/* Whatever is still queued belongs to the old session: the host discards it anyway. */
	out_drop();
	session_end();
	struct msg m;
	msg_begin_resync(&m, "sync", rq->id >= 0 ? rq->id : 0);
	msg_int(&m, "nonce", nonce);
	msg_int(&m, "protocol", PROTOCOL_VERSION);
	msg_str(&m, "agent", AGENT_VERSION);
	/* The request types this agent knows: a newer host checks before it sends one. */
	msg_open(&m, "types", '[');
	for (size_t i = 0; i < sizeof handlers / sizeof handlers[0]; i++)
		msg_str(&m, NULL, handlers[i].type);
	msg_close(&m, ']');
	msg_send(&m);
}

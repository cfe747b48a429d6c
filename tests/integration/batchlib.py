"""batchlib.py - the Files + Batches calls the integration tests share, over the
standard library's HTTP client (multipart bodies are built by hand)."""
import json
import time
import uuid

TERMINAL = ("completed", "failed", "cancelled", "expired")


def multipart(fields, files):
    """A multipart/form-data body: fields {name: str}, files {name: (filename, bytes)}."""
    b = uuid.uuid4().hex
    out = b""
    for name, value in fields.items():
        out += (f"--{b}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n"
                f"{value}\r\n").encode()
    for name, (filename, data) in files.items():
        out += (f"--{b}\r\nContent-Disposition: form-data; name=\"{name}\"; "
                f"filename=\"{filename}\"\r\nContent-Type: application/jsonl\r\n\r\n").encode()
        out += data + b"\r\n"
    out += f"--{b}--\r\n".encode()
    return out, f"multipart/form-data; boundary={b}"


def upload(srv, data, filename="input.jsonl", purpose="batch"):
    """POST /v1/files; returns (status, parsed body)."""
    body, ctype = multipart({"purpose": purpose}, {"file": (filename, data)})
    st, raw, _ = srv.request("POST", "/v1/files", body, headers={"Content-Type": ctype})
    return st, json.loads(raw)


def request_line(custom_id, model, prompt, max_tokens=8, **body):
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": "/v1/completions",
                       "body": {"model": model, "prompt": prompt, "max_tokens": max_tokens,
                                "temperature": 0, **body}})


def jsonl(lines):
    return ("\n".join(lines) + "\n").encode()


def create(srv, file_id, **extra):
    """POST /v1/batches; returns (status, parsed body)."""
    body = {"input_file_id": file_id, "endpoint": "/v1/completions",
            "completion_window": "24h", **extra}
    st, raw, _ = srv.post("/v1/batches", body)
    return st, json.loads(raw)


def get(srv, batch_id):
    st, raw, _ = srv.get(f"/v1/batches/{batch_id}")
    return json.loads(raw)


def wait(srv, batch_id, until=TERMINAL, timeout=120, poll=0.05):
    """Poll until the batch's status is in `until` (or the timeout); returns it."""
    deadline = time.time() + timeout
    while True:
        b = get(srv, batch_id)
        if b["status"] in until or time.time() > deadline:
            return b
        time.sleep(poll)


def content(srv, file_id):
    """The parsed lines of a file (output or error), [] for a null id."""
    if not file_id:
        return []
    st, raw, _ = srv.get(f"/v1/files/{file_id}/content")
    assert st == 200, (st, raw[:200])
    return [json.loads(x) for x in raw.decode().splitlines() if x.strip()]


# ---- hostile input: lines as bytes, and checks that what comes back is clean ----

def raw_line(custom_id, prompt=b'"hi"', model="dummy:tiny", tail=b""):
    """An input line as bytes, with custom_id and prompt spliced in as they are (JSON
    text, which may hold escapes like \\u0000 or raw bytes that are not UTF-8)."""
    return (b'{"custom_id":' + custom_id + b',"method":"POST","url":"/v1/completions",'
            b'"body":{"model":"' + model.encode() + b'","prompt":' + prompt
            + b',"max_tokens":2,"temperature":0}}' + tail)


def utf8(raw):
    """Whether bytes are valid UTF-8 (strict: no surrogates, no overlong forms)."""
    try:
        raw.decode("utf-8", errors="strict")
        return True
    except UnicodeDecodeError:
        return False


def content_raw(srv, file_id):
    """The bytes of a file (b"" for a null id)."""
    if not file_id:
        return b""
    st, raw, _ = srv.get(f"/v1/files/{file_id}/content")
    assert st == 200, (st, raw[:200])
    return raw

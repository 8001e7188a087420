#!/usr/bin/python3
"""An independent OpenAI-API client written with Python's standard library only (urllib, json).

Usage: sse_client.py URL ENDPOINT BODY_JSON
Sends BODY_JSON to URL+ENDPOINT. For "stream": true it reads the response line by line as an
OpenAI client does (server-sent events: 'data: {json}' lines separated by blank lines, ending with
'data: [DONE]') and checks the chunk shapes strictly; it prints one JSON object with the joined
text, the finish reason, the usage, and the number of chunks. Exits 1 with a message on any
deviation from the protocol.
"""
import json
import sys
import urllib.error
import urllib.request


def fail(msg):
    print("PROTOCOL ERROR: " + msg, file=sys.stderr)
    sys.exit(1)


def main():
    url, endpoint, body = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    chat = endpoint.endswith("/chat/completions")
    req = urllib.request.Request(url + endpoint, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        resp = urllib.request.urlopen(req, timeout=120)
    except urllib.error.HTTPError as e:
        print(json.dumps({"status": e.code, "error": json.loads(e.read().decode())}))
        return
    if not body.get("stream"):
        data = json.loads(resp.read().decode())
        choice = data["choices"][0]
        text = choice["message"]["content"] if chat else choice["text"]
        print(json.dumps({"status": resp.status, "text": text, "finish_reason": choice["finish_reason"],
                          "usage": data["usage"], "object": data["object"]}))
        return
    ctype = resp.headers.get("Content-Type", "")
    if not ctype.startswith("text/event-stream"):
        fail("content type " + ctype)
    text, finish, usage, chunks, done, first_role = "", None, None, 0, False, None
    pending_blank = False
    for raw in resp:
        line = raw.decode("utf-8")
        if line in ("\n", "\r\n"):
            pending_blank = False
            continue
        if pending_blank:
            fail("events must be separated by a blank line")
        if not line.startswith("data: "):
            fail("line without 'data: ': %r" % line)
        payload = line[len("data: "):].rstrip("\r\n")
        pending_blank = True
        if done:
            fail("data after [DONE]")
        if payload == "[DONE]":
            done = True
            continue
        obj = json.loads(payload)
        chunks += 1
        want = "chat.completion.chunk" if chat else "text_completion"
        if obj.get("object") != want:
            fail("object %r, want %r" % (obj.get("object"), want))
        for key in ("id", "created", "model", "choices"):
            if key not in obj:
                fail("chunk without " + key)
        if obj.get("usage") is not None:
            if obj["choices"]:
                fail("the usage chunk must have empty choices")
            usage = obj["usage"]
            continue
        c = obj["choices"][0]
        if finish is not None:
            fail("a content chunk after the finish_reason chunk")
        if chat:
            delta = c["delta"]
            if chunks == 1:
                first_role = delta.get("role")
            text += delta.get("content") or ""
        else:
            text += c["text"]
        finish = c.get("finish_reason")
    if not done:
        fail("no [DONE]")
    if chat and first_role != "assistant":
        fail("the first chat chunk must carry role 'assistant'")
    print(json.dumps({"status": resp.status, "text": text, "finish_reason": finish, "usage": usage,
                      "chunks": chunks}))


if __name__ == "__main__":
    main()

// Helpers for the server's integration tests: a tiny generated model shared by the whole binary, a
// server on loopback port 0, small HTTP calls, and raw sockets for connection-level faults.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "http/raw_connection.h"
#include "infergate/common/json.h"
#include "infergate/http/client.h"
#include "infergate/runtime/server/server.h"

namespace infergate::runtime::server::testing {

using ClientResponse = http::ClientResponse;

// A small llama-architecture model (2 layers, hidden 64, vocab 512), generated once per process.
const std::filesystem::path& tiny_model();

// Options for serving the tiny model on 127.0.0.1:0.
ServeOptions tiny_options();
std::unique_ptr<Server> start(const ServeOptions& options);

ClientResponse get(const Server& s, const std::string& path);
ClientResponse post(const Server& s, const std::string& path, const std::string& body,
                    const http::Headers& headers = {});
// The data of every server-sent event of a streamed response body, in order.
std::vector<std::string> sse_events(const std::string& body);

// A raw TCP connection to the server (for half-sent requests, disconnects).
using RawConnection = http::testing::RawConnection;

// Resident memory of this process (VmRSS), bytes.
int64_t rss_bytes();

}  // namespace infergate::runtime::server::testing

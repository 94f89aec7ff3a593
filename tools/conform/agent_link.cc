// The agent's connection: one line out, one line back.
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conform.h"

namespace uroce::conform {

std::unique_ptr<Agent> Agent::connect(const std::string& where, std::string* error) {
  std::string host = where, port = "18600";
  if (const size_t c = where.rfind(':'); c != std::string::npos) {
    host = where.substr(0, c);
    port = where.substr(c + 1);
  }
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
    *error = "--agent " + where + ": not a host[:port]";
    return nullptr;
  }
  int fd = -1;
  // The agent may still be starting: try for 10 s.
  for (int i = 0; i < 100 && fd < 0; ++i) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (::connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
      usleep(100 * 1000);
    }
  }
  freeaddrinfo(res);
  if (fd < 0) {
    *error = "--agent " + where + ": no uroce-conform-agent answers there (start it on the DUT first)";
    return nullptr;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return std::unique_ptr<Agent>(new Agent(fd));
}

Agent::~Agent() {
  (void)!write(fd_, "bye\n", 4);
  close(fd_);
}

std::string Agent::call(const std::string& line) {
  const std::string l = line + "\n";
  for (size_t w = 0; w < l.size();) {
    const ssize_t k = write(fd_, l.data() + w, l.size() - w);
    if (k <= 0) return "err agent gone";
    w += static_cast<size_t>(k);
  }
  for (;;) {
    if (const size_t nl = buf_.find('\n'); nl != std::string::npos) {
      std::string answer = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return answer;
    }
    char tmp[65536];
    const ssize_t k = read(fd_, tmp, sizeof tmp);
    if (k <= 0) return "err agent gone";
    buf_.append(tmp, static_cast<size_t>(k));
  }
}

}  // namespace uroce::conform

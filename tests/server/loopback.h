// A raw TCP connection to a test server on 127.0.0.1, for clients that
// misbehave (vanish mid-request, trickle bytes, send garbage).
#pragma once
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace ms {

// The connected socket, or -1.
inline int connect_to(int port) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

// n clients that each send `start` (a request line and the start of a
// header) and then one more header byte every period_ms, until destroyed.
class Trickle {
public:
    Trickle(int port, int n, const std::string& start, int period_ms) {
        for (int i = 0; i < n; i++) {
            const int fd = connect_to(port);
            if (fd >= 0) send(fd, start.data(), start.size(), MSG_NOSIGNAL);
            fds.push_back(fd);
        }
        thread_ = std::thread([this, period_ms] {
            while (running_) {
                for (int fd : fds) send(fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                std::this_thread::sleep_for(std::chrono::milliseconds(period_ms));
            }
        });
    }
    ~Trickle() {
        running_ = false;
        thread_.join();
        for (int fd : fds) close(fd);
    }
    std::vector<int> fds;  // -1 where a connection failed

private:
    std::atomic<bool> running_{true};
    std::thread thread_;
};

}  // namespace ms

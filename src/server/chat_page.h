// The chat page served at / : src/server/chat_page.html, compiled in by CMake
// (a generated chat_page.cpp), so the binary needs no files beside it.
#pragma once

namespace ms {

extern const char kChatPage[];

}  // namespace ms

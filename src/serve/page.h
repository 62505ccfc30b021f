// page.h: the web chat page served at "/" (plain HTML/CSS/JS, no build step).
#pragma once

namespace serve {
extern const char* const kChatPage;
}

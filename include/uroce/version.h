// uroce: a RoCEv2 protocol stack in user space.
#pragma once

#define UROCE_VERSION_MAJOR 0
#define UROCE_VERSION_MINOR 1
#define UROCE_VERSION_STRING "0.1.0"

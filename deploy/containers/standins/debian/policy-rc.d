#!/bin/sh
# No init system runs in an image: packages must not start their daemons while installed
# (Debian's prometheus and postgresql would try).
exit 101

/* rbt_version.h - rbtrace's release version, written once.
 *
 * `rbtrace --version`, the recorder's tool field in every trace header, the
 * reader library's pkg-config file and the Debian package all take it from here
 * (./dev reads the string below). It must never hold anything but the number.
 */
#ifndef RBT_VERSION_H
#define RBT_VERSION_H

#define RBT_VERSION "0.1.0"

/* RBT_STR(RBT_FORMAT_VERSION) -> "1" */
#define RBT__STR(x) #x
#define RBT_STR(x)  RBT__STR(x)

#endif

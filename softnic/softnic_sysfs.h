/*
 * softnic's fake sysfs for provider mode (softnic_sysfs.c): the names and
 * the two writers shared by the preload and the provider.
 */
#ifndef SOFTNIC_SYSFS_H
#define SOFTNIC_SYSFS_H

#include <stdbool.h>

#define SN_SYSFS_IBDEV	 "softnic0"
#define SN_SYSFS_UVERBS	 "uverbs_softnic0" /* never a kernel device's name */
#define SN_SYSFS_CDEV	 "/dev/infiniband/" SN_SYSFS_UVERBS
#define SN_SYSFS_MARK	 ".softnic"	/* says the tree is ours */
#define SN_SYSFS_NETMARK ".softnic-net" /* ... and has device/net (newer) */
#define SN_SYSFS_PATH	 512

/* The static tree under root, unless it is there already. */
int sn_sysfs_make(const char *root);
/* Write root/rel (its directories made), whole or not at all. */
int sn_sysfs_put(const char *root, const char *rel, const char *text);
/* Is root a tree sn_sysfs_make wrote? */
bool sn_sysfs_ours(const char *root);

#endif

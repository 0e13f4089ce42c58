/* net.h — the guest network setup pushed by `configure` (net.c). */
#pragma once

/* Dotted IPv4 strings: address with /prefix, gateway, resolver. */
struct net_config {
	const char *address;
	const char *gateway;
	const char *dns;
};

/* Configure lo, eth0, the default route and resolv.conf; 0 or an errno, `what` says where. */
int net_configure(const struct net_config *c, const char **what);

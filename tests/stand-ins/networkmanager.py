#!/usr/bin/python3
"""tests/stand-ins/networkmanager.py METERED - NetworkManager cannot run here.

This stand-in owns org.freedesktop.NetworkManager on the system bus and serves
what hostpull reads of it, with NetworkManager's D-Bus contract: the
`Metered` property (type u, NMMetered: 0 unknown, 1 yes, 2 no, 3 guess-yes,
4 guess-no) of the interface org.freedesktop.NetworkManager on
/org/freedesktop/NetworkManager, through org.freedesktop.DBus.Properties.
Any other path, interface or property is an error, as there. Each Get is
printed on stderr; "ready" on stdout once the name is owned.
"""
import sys

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

NM = "org.freedesktop.NetworkManager"
PATH = "/org/freedesktop/NetworkManager"


class NetworkManager(dbus.service.Object):
    def __init__(self, bus, metered):
        super().__init__(bus, PATH)
        self.metered = metered

    def props(self, iface):
        if iface != NM:
            raise dbus.exceptions.DBusException(
                f"No such interface '{iface}'",
                name="org.freedesktop.DBus.Error.UnknownInterface")
        return {"Metered": dbus.UInt32(self.metered), "State": dbus.UInt32(70)}

    @dbus.service.method(dbus.PROPERTIES_IFACE, in_signature="ss", out_signature="v")
    def Get(self, iface, prop):
        print(f"Get {iface} {prop}", file=sys.stderr, flush=True)
        props = self.props(iface)
        if prop not in props:
            raise dbus.exceptions.DBusException(
                f"No such property '{prop}'",
                name="org.freedesktop.DBus.Error.UnknownProperty")
        return props[prop]

    @dbus.service.method(dbus.PROPERTIES_IFACE, in_signature="s", out_signature="a{sv}")
    def GetAll(self, iface):
        print(f"GetAll {iface}", file=sys.stderr, flush=True)
        return self.props(iface)


def main():
    metered = int(sys.argv[1])
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    name = dbus.service.BusName(NM, bus, do_not_queue=True)
    NetworkManager(bus, metered)
    print("ready", name.get_name(), flush=True)
    GLib.MainLoop().run()


if __name__ == "__main__":
    main()

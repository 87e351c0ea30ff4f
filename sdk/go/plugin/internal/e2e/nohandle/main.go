// Command nohandle is a test plugin with a common mistake: it registers its hook in main,
// which a plugin never runs. The SDK must refuse the load with a reason that says so.
package main

import (
	"github.com/tinybroker/tinybroker/sdk/go/plugin"
	"github.com/tinybroker/tinybroker/sdk/go/plugin/onack"
)

func main() {
	onack.Handle(func(*plugin.Message, plugin.Event) {})
}

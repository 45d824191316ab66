package connector

// nulled counts a value delivered as NULL (a NaN, or with
// UNREPRESENTABLE_VALUES=null a value Feldera cannot hold) and logs the
// first per column.
func (c *Connector) nulled(table, column string, err error) {
	for _, ts := range c.tableStats {
		if ts.Source == table {
			ts.Nulled.Add(1)
		}
	}
	if _, seen := c.nulledLogged.LoadOrStore(table+"\x00"+column, true); !seen {
		c.logger.Warn("a value Feldera cannot hold is delivered as NULL (counted in pgfeldera_values_nulled_total; logged once per column)",
			"table", table, "column", column, "value", err.Error())
	}
}

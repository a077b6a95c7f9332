package portal

import "net/http"

func (p *Portal) usagePage(w http.ResponseWriter, r *http.Request, sess *Session) {}
